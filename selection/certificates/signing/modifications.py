"""Modification analysis: what each revision after a signature may change, pyHanko's rules with an
on-demand reverse-reference table (linear time) and stricter metadata rules (`DIFF_POLICY`)."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Mapping

from lxml import etree
from pyhanko.pdf_utils import generic, misc
from pyhanko.pdf_utils.decode_limits import DecodePurpose
from pyhanko.pdf_utils.reader import HistoricalResolver, PdfFileReader, RawPdfPath
from pyhanko.sign.diff_analysis import (
    DEFAULT_DIFF_POLICY,
    CatalogModificationRule,
    DocInfoRule,
    DSSCompareRule,
    FormUpdatingRule,
    GenericFieldModificationRule,
    MetadataUpdateRule,
    ModificationLevel,
    ObjectStreamRule,
    SigFieldCreationRule,
    SigFieldModificationRule,
    StandardDiffPolicy,
    SuspiciousModification,
    XrefStreamRule,
)
from pyhanko.sign.diff_analysis.constants import ACROFORM_EXEMPT_STRICT_COMPARISON, ROOT_EXEMPT_STRICT_COMPARISON

# --------------------------------------------------------------------------- modification analysis
#
# pyHanko checks what each revision after a signature changed (a later revision may only fill
# signature fields). For every object a later revision overrides it needs every path from the
# trailer to that object in the signed revision, and pyHanko 0.38 precomputes that table for
# *every* object by enumerating *every* path: cost = number of paths, not objects. WeasyPrint
# gives all pages one /Resources dictionary holding every Form XObject of the document, and each
# XObject's /Resources points at the shared /Font dictionary, so each font object is reached by
# pages x (XObjects + 1) paths (21 x 226 = 4,746 in a 21-page, 10-chart record) and the whole
# font subtree is walked that often - again for each signed revision. The table below gives the
# same answer (checked entry by entry against pyHanko's) but computes the entry for one reference
# when the analysis asks for it, walking only objects from which that reference can be reached:
# one linear pass over the graph plus the (few) paths to the catalog, info, metadata and the
# field a signing revision overrides. The rules and the verdicts are pyHanko's, unchanged.

_TRAILER = object()  # the trailer's node in the reference graph


def _structure_of(resolver: HistoricalResolver, ref):
    """``ref`` as ``resolver``'s revision has it, for reading which references it holds.

    An object unchanged since that revision is the reader's own parsed copy, shared by every revision,
    instead of the copy each HistoricalResolver makes of every object it is asked for (re-pointing each
    reference at itself): the index walks every object of every revision the analysis compares, and
    those copies were a quarter of a 58-page record's verification. Objects changed later, and
    encrypted ones, go through the resolver as before."""
    if ref in resolver.cache:
        return resolver.cache[ref]
    changes = resolver.reader.__dict__.setdefault("_kvs_last_change", {})  # per reader: the same for every revision
    if ref not in changes:
        try:
            changes[ref] = resolver.reader.xrefs.get_last_change(ref)
        except KeyError:
            changes[ref] = None
    last_change = changes[ref]
    if last_change is None or last_change > resolver.revision:
        return resolver(ref)
    obj = resolver.reader.get_object(ref, transparent_decrypt=False)
    return resolver(ref) if isinstance(obj, generic.DecryptedObjectProxy) else obj


def _reference_parents(resolver: HistoricalResolver) -> dict:
    """ref -> the refs (or the trailer) whose structure holds it: one linear pass over the revision's graph."""
    parents: dict = defaultdict(set)
    todo = [(_TRAILER, resolver.trailer_view)]
    seen = set()
    while todo:
        node, obj = todo.pop()
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, generic.IndirectObject):
                ref = o.reference
                parents[ref].add(node)
                if ref not in seen:
                    seen.add(ref)
                    todo.append((ref, _structure_of(resolver, ref)))
            elif isinstance(o, generic.DictionaryObject):
                stack.extend(o.values())
            elif isinstance(o, generic.ArrayObject):
                stack.extend(o)
    return parents


def _page_tree_paths(root) -> dict:
    """ref -> its canonical path in the page tree, as pyHanko maps it."""
    pages_ref = root.raw_get("/Pages")
    page_tree = {}
    pages_path = ("/Root", "/Pages")
    if isinstance(pages_ref, generic.IndirectObject):
        page_tree[pages_ref.reference] = pages_path

    def walk_pages(node, path):
        for ix, kid in enumerate(node["/Kids"]):
            kid_path = path + ("/Kids", ix)
            if isinstance(kid, generic.IndirectObject):
                if kid.reference in page_tree:
                    raise misc.PdfReadError("Circular reference in page tree in mapping stage")
                page_tree[kid.reference] = kid_path
            kid = kid.get_object()
            if kid.get("/Type", None) == "/Pages":
                walk_pages(kid, kid_path)

    walk_pages(pages_ref.get_object(), pages_path)
    return page_tree


def _struct_tree_members(root) -> set:
    """The refs of the structure tree's elements, as pyHanko collects them."""
    struct = set()

    def walk_struct(elem):
        try:
            children = elem["/K"]
        except KeyError:
            return
        if not isinstance(children, generic.ArrayObject):
            children = (children,)
        for child in children:
            child_ref = None
            if isinstance(child, generic.IndirectObject):
                child_ref = child.reference
                child = child.get_object()
            if not isinstance(child, generic.DictionaryObject):
                continue
            try:
                if child["/Type"] != "/StructElem":
                    continue
            except KeyError:
                pass
            if child_ref is not None:
                if child_ref in struct:
                    raise misc.PdfReadError("Circular reference in structure tree in mapping stage")
                struct.add(child_ref)
            walk_struct(child)

    try:
        walk_struct(root.raw_get("/StructTreeRoot").get_object())
    except KeyError:
        pass
    return struct


class UsagesOfRef(dict):
    """ref -> {RawPdfPath}: the same answer as pyHanko 0.38's HistoricalResolver
    `_load_reverse_xref_cache`, but each entry is computed when first asked for, by walking only
    the objects from which that reference can be reached."""

    def __init__(self, resolver: HistoricalResolver):
        super().__init__()
        self.resolver = resolver
        self._parents: dict | None = None
        self._page_tree: dict | None = None
        self._struct_tree: set | None = None

    def __bool__(self):  # pyHanko does `cache or {}`: an empty lazy table must stay in use
        return True

    # -- one linear pass over the revision's graph -------------------------------------------
    def _index(self):
        if self._parents is not None:
            return
        self._parents = _reference_parents(self.resolver)
        root = self.resolver.root
        # the same canonical page-tree paths and structure-tree members as pyHanko
        self._page_tree = _page_tree_paths(root)
        self._struct_tree = _struct_tree_members(root)

    def _ancestors(self, target) -> set:
        found, todo = {target}, [target]
        parents = self._parents
        while todo:
            for parent in parents.get(todo.pop(), ()):
                if parent is not _TRAILER and parent not in found:
                    found.add(parent)
                    todo.append(parent)
        return found

    # -- the paths to one reference, by pyHanko's own rules ------------------------------------
    def __missing__(self, target):
        self._index()
        if target not in self._parents:
            raise KeyError(target)  # not reachable: pyHanko's table has no entry either
        relevant = self._ancestors(target)
        resolver, page_tree, struct_tree = self.resolver, self._page_tree, self._struct_tree
        found: set = set()
        on_path: set = set()

        def walk(obj, path, is_struct):  # one frame per step, like pyHanko's own walk
            if isinstance(obj, generic.IndirectObject):
                ref = obj.reference
                if ref not in relevant or ref in on_path:
                    return  # no path from here reaches the target, or a cycle
                if ref == target:
                    found.add(path)  # a path through the target cannot reach it again
                    return
                if page_tree.get(ref, path) != path:
                    return  # page-tree nodes only via their canonical path
                if not is_struct and ref in struct_tree:
                    return
                on_path.add(ref)
                try:
                    walk(resolver(ref), path, is_struct)
                finally:
                    on_path.discard(ref)
            elif isinstance(obj, generic.DictionaryObject):
                for k, v in obj.items():
                    if k == "/Parent" or (is_struct and k == "/P"):
                        continue
                    walk(v, path + (k,), is_struct or (path == ("/Root", "/StructTreeRoot") and k == "/K"))
            elif isinstance(obj, generic.ArrayObject):
                for ix, v in enumerate(obj):
                    walk(v, path + (ix,), is_struct)

        walk(resolver.trailer_view, (), False)
        result = {RawPdfPath(*p) for p in found}
        self[target] = result
        return result


def install_on_demand_usages(resolver: HistoricalResolver) -> None:
    """Give `resolver` the on-demand table, unless pyHanko already built its own."""
    if getattr(resolver, "_indirect_object_access_cache", "absent") is None:
        resolver._indirect_object_access_cache = UsagesOfRef(resolver)


class ObjStmIndexReader(PdfFileReader):
    """A reader that parses each object stream's header once.

    pyHanko 0.38 re-reads an object stream's header from the start for every object it takes from
    it; WeasyPrint (pydyf) puts every non-stream object of the record (~500) into one object
    stream, so reading the document once costs ~N^2/2 header entries (0.5 s of CPU for the demo
    record). Only the common case is handled here; anything unusual (an index out of range, an
    object missing from the header, a damaged header or object) is left to pyHanko's own method,
    so the result is the same object or the same error.
    """

    def _get_object_from_stream(self, idnum, stmnum, idx):
        if self.strict:  # strict mode also checks each object's position: pyHanko's method
            return super()._get_object_from_stream(idnum, stmnum, idx)
        indexes = self.__dict__.setdefault("_kvs_objstm_index", {})
        entry = indexes.get(stmnum)
        if entry is None:
            entry = indexes[stmnum] = self._kvs_index_objstm(stmnum)
        if entry is not False:
            data, first, offsets, count = entry
            offset = offsets.get(idnum)
            if offset is not None and 0 <= idx < count:
                stream = io.BytesIO(data)
                stream.seek(first + offset)
                try:
                    obj = generic.read_object(stream, generic.Reference(idnum, 0, self))
                except (misc.PdfStreamError, misc.PdfReadError):
                    obj = None
                if obj is not None and not isinstance(obj, (generic.StreamObject, generic.IndirectObject)):
                    return obj
        return super()._get_object_from_stream(idnum, stmnum, idx)

    def _kvs_index_objstm(self, stmnum):
        try:
            stream = generic.Reference(stmnum, 0, self).get_object()
            if not isinstance(stream, generic.StreamObject) or stream.get("/Type") != "/ObjStm":
                return False
            count, first = int(stream["/N"]), int(stream["/First"])
            data = stream.read_data(DecodePurpose.OBJECT_STREAM)
        except Exception:
            return False
        header = io.BytesIO(data)
        offsets: dict[int, int] = {}
        for _ in range(count):
            try:
                misc.read_non_whitespace(header, seek_back=True)
                objnum = generic.NumberObject.read_from_stream(header)
                misc.read_non_whitespace(header, seek_back=True)
                offset = generic.NumberObject.read_from_stream(header)
            except Exception:  # damaged: the objects after this point go to pyHanko's method
                break
            offsets.setdefault(int(objnum), int(offset))  # pyHanko takes the first match
        return data, first, offsets, count


# What a signing or validation-data (DSS) revision rewrites in the document's metadata; anything
# else changed in /Info or the XMP after a signature (a new title, author, subject...) voids it.
# pyHanko's own rules accept any /Info edit and any well-formed XMP at LTA_UPDATES, so a retitled
# record still said "all signatures OK".
MUTABLE_INFO_KEYS = frozenset({"/ModDate", "/Producer"})
_XMP_NS = "http://ns.adobe.com/xap/1.0/"
_PDF_NS = "http://ns.adobe.com/pdf/1.3/"
_RDF_NS = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
MUTABLE_XMP_PROPERTIES = frozenset({f"{{{_XMP_NS}}}ModifyDate", f"{{{_XMP_NS}}}MetadataDate", f"{{{_PDF_NS}}}Producer"})


def in_revision(resolver: HistoricalResolver, obj):
    """`obj` as this revision has it: an indirect reference read from a historical revision points at
    the reader (the newest revision), so it is resolved through the revision's own resolver."""
    return resolver(obj.reference) if isinstance(obj, generic.IndirectObject) else obj


def _info_entries(resolver: HistoricalResolver) -> dict[str, str]:
    info = in_revision(resolver, resolver.trailer_view.raw_get("/Info") if "/Info" in resolver.trailer_view else None)
    if not isinstance(info, generic.DictionaryObject):
        return {}
    return {str(key): repr(in_revision(resolver, value)) for key, value in info.items()}


def _xmp_properties(resolver: HistoricalResolver) -> dict[str, str]:
    """Every property of the XMP packet (attributes and elements of each rdf:Description)."""
    root = in_revision(resolver, resolver.trailer_view.raw_get("/Root"))
    metadata = in_revision(resolver, root.raw_get("/Metadata")) if "/Metadata" in root else None
    if not isinstance(metadata, generic.StreamObject):
        return {}
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    xml = etree.fromstring(metadata.read_data(DecodePurpose.XMP_METADATA), parser=parser)
    properties: dict[str, str] = {}
    for description in xml.iter(f"{{{_RDF_NS}}}Description"):
        for name, value in description.attrib.items():
            if name != f"{{{_RDF_NS}}}about":
                properties[name] = value
        for child in description:
            properties[str(child.tag)] = etree.tostring(child, method="c14n").decode()
    return properties


def _refuse_changes(what: str, before: Mapping[str, str], after: Mapping[str, str], mutable: frozenset) -> None:
    changed = sorted(k for k in before.keys() | after.keys() if k not in mutable and before.get(k) != after.get(k))
    if changed:
        raise SuspiciousModification(f"{what} changed after signing: {', '.join(changed)}")


class StrictDocInfoRule(DocInfoRule):
    """pyHanko's /Info rule, refusing any change but the modification date and the producer."""

    def apply(self, old, new):
        _refuse_changes("/Info", _info_entries(old), _info_entries(new), MUTABLE_INFO_KEYS)
        yield from super().apply(old, new)


class StrictMetadataRule(MetadataUpdateRule):
    """pyHanko's XMP rule (well-formed XML, no entities), refusing any change to a property but
    the modification and metadata dates and the producer."""

    def apply(self, old, new):
        updates = list(super().apply(old, new))  # the syntax checks come first
        _refuse_changes("XMP metadata", _xmp_properties(old), _xmp_properties(new), MUTABLE_XMP_PROPERTIES)
        yield from updates


class _OnDemandUsagesDiffPolicy(StandardDiffPolicy):
    """pyHanko's default diff policy with the on-demand table (same walking rules, same verdicts),
    and /Info and XMP edits after a signature refused (see StrictDocInfoRule)."""

    def review_file(self, reader, base_revision, field_mdp_spec=None, doc_mdp=None):
        if isinstance(base_revision, int):
            base_revision = reader.get_historical_resolver(base_revision)
        install_on_demand_usages(base_revision)
        return super().review_file(reader, base_revision, field_mdp_spec=field_mdp_spec, doc_mdp=doc_mdp)

    def apply(self, old, new, field_mdp_spec=None, doc_mdp=None):
        install_on_demand_usages(old)
        return super().apply(old, new, field_mdp_spec=field_mdp_spec, doc_mdp=doc_mdp)


# DEFAULT_DIFF_POLICY's rules, in its order, with the two metadata rules made strict (a test
# checks this list against pyHanko's, so an upgrade that adds a rule is noticed).
DIFF_POLICY = _OnDemandUsagesDiffPolicy(
    global_rules=[
        CatalogModificationRule(),
        StrictDocInfoRule().as_qualified(ModificationLevel.LTA_UPDATES),
        XrefStreamRule().as_qualified(ModificationLevel.LTA_UPDATES),
        ObjectStreamRule().as_qualified(ModificationLevel.LTA_UPDATES),
        DSSCompareRule().as_qualified(ModificationLevel.LTA_UPDATES),
        StrictMetadataRule().as_qualified(ModificationLevel.LTA_UPDATES),
    ],
    form_rule=DEFAULT_DIFF_POLICY.form_rule,
    reject_object_freeing=DEFAULT_DIFF_POLICY.reject_object_freeing,
    ignore_orphaned_objects=DEFAULT_DIFF_POLICY.ignore_orphaned_objects,
    ignore_identical_objects=DEFAULT_DIFF_POLICY.ignore_identical_objects,
)

# The revision that adds a document's first signature is compared with the unsigned document before
# it, which pyHanko's rules do not expect: a first signature also sets the form's /SigFlags
# (SignaturesExist, AppendOnly) and, certifying, adds the catalog's /Perms naming it (DocMDP). The
# same rules otherwise; those two keys are let through here and checked in `_first_signature_changes`.
FIRST_SIGNATURE_POLICY = _OnDemandUsagesDiffPolicy(
    global_rules=[CatalogModificationRule(ignored_keys=ROOT_EXEMPT_STRICT_COMPARISON | {"/Perms"})]
    + DIFF_POLICY.global_rules[1:],
    form_rule=FormUpdatingRule(
        field_rules=[SigFieldCreationRule(), SigFieldModificationRule(), GenericFieldModificationRule()],
        ignored_acroform_keys=ACROFORM_EXEMPT_STRICT_COMPARISON | {"/SigFlags"},
    ),
    reject_object_freeing=True,
    ignore_orphaned_objects=True,
    ignore_identical_objects=True,
)
