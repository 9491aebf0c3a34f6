"""The API's pagination: limit/offset with a ceiling, so `?limit=10**30` is a page of 500, not an
integer overflow in the database (SQLite raised one: a 500)."""

from rest_framework.pagination import LimitOffsetPagination


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 500
