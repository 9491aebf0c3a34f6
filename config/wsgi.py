import os

from django.core.wsgi import get_wsgi_application

from config.request_limits import ChunkedBodyLimit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = ChunkedBodyLimit(get_wsgi_application())
