"""Translations of the capacity verdict's summary and reasons (selection.domain.capacity), at
display time: one pattern per sentence shape, a translatable template each, numbers kept.
Unknown text is returned unchanged (see selection.i18n_names for the approach)."""

from __future__ import annotations

import re

from django.utils.translation import gettext_lazy as _

_N = r"[\d.,]+"

_RULES = tuple((re.compile(p.replace("N", _N)), t) for p, t in (
    (r"KV pool (?P<pool>N GiB) per GPU \((?P<blocks>N) blocks of (?P<block>N) tokens\); (?P<peak>N) concurrent "
     r"sequences \(one at max context (?P<max>N), the rest at avg (?P<avg>N)\) need (?P<need>N GiB)",
     _("KV pool %(pool)s per GPU (%(blocks)s blocks of %(block)s tokens); %(peak)s concurrent sequences (one at max "
       "context %(max)s, the rest at avg %(avg)s) need %(need)s")),
    (r"max context (?P<max>N) exceeds the model's (?P<positions>N) positions",
     _("max context %(max)s exceeds the model's %(positions)s positions")),
    (r"weights \((?P<weights>N GiB) per GPU\) leave no room for KV cache",
     _("weights (%(weights)s per GPU) leave no room for KV cache")),
    (r"the plan uses (?P<gpus>N) GPUs, above the budget of (?P<budget>N)",
     _("the plan uses %(gpus)s GPUs, above the budget of %(budget)s")),
    (r"fits with 30% headroom on (?P<gpus>N) GPU\(s\) \(TP=(?P<tp>N), PP=(?P<pp>N), (?P<kv>\S+) KV\)",
     _("fits with 30%% headroom on %(gpus)s GPU(s) (TP=%(tp)s, PP=%(pp)s, %(kv)s KV)")),
    (r"fits with 20% headroom only on (?P<gpus>N) GPU\(s\); below the 30% comfort margin",
     _("fits with 20%% headroom only on %(gpus)s GPU(s); below the 30%% comfort margin")),
    (r"at 70% of the pool only (?P<seqs>N) sequences of avg context fit",
     _("at 70%% of the pool only %(seqs)s sequences of avg context fit")),
    (r"does not fit", _("does not fit")),
    (r"at 80% of the pool only (?P<seqs>N) sequences of avg context fit \(peak (?P<peak>N)\)",
     _("at 80%% of the pool only %(seqs)s sequences of avg context fit (peak %(peak)s)")),
))


def translate_capacity(text):
    """A capacity verdict summary or reason in the active language; unknown text unchanged."""
    if not isinstance(text, str):
        return text
    for pattern, template in _RULES:
        m = pattern.fullmatch(text)
        if m:
            return str(template) % m.groupdict()
    return text
