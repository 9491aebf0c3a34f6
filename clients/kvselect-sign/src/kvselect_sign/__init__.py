"""kvselect-sign: sign a kvselect decision record's prepared signature with a key that stays here."""

__version__ = "0.1.0"
