"""kvselect-sign: sign a kvselect decision record's prepared signature with a key that stays here."""

import warnings

__version__ = "0.1.0"

# cryptography deprecates DSA, which pyHanko still imports; an owner signing with RSA or EC keys would
# read the warning on every call as a problem with their signature. Set before pyHanko is imported.
warnings.filterwarnings("ignore", message=r".*\bDSA\b.*deprecat")
