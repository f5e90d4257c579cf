"""The broker releases whose store rules differ (R§12), and the rules that name one.

``VERSIONS``: ``"4.9"`` (4.9.7 and 4.9.8), ``"5.3"`` (5.3.3), ``"5.4"`` (5.4.0), ``"5.5"`` (5.5.1);
``"5.x"`` spells the newest. A rule that changed names the release that introduced it (``since``).
"""
from __future__ import annotations


V49, V53, V54, V55 = "4.9", "5.3", "5.4", "5.5"
VERSIONS = (V49, V53, V54, V55)          # oldest first: ``since`` compares positions
V5X = "5.x"                              # a spelling of the newest 5.x
# 5.5.0 is not 5.5: it lacks 5.5.1's negative-TOTALSIZE check (R§12)
_SPELLINGS = {V5X: VERSIONS[-1], "4.9.7": V49, "4.9.8": V49, "5.3.3": V53, "5.4.0": V54, "5.5.1": V55}


def resolve_version(name: str) -> str:
    """The ``VERSIONS`` entry ``name`` spells (a release number or ``"5.x"`` = the newest)."""
    version = _SPELLINGS.get(name, name)
    if version not in VERSIONS:
        raise ValueError(f"broker version must be one of {', '.join(VERSIONS + (V5X,))}, got {name!r}")
    return version


def versions_of(spec: str) -> list[str]:
    """The versions a what-if compares, as spelled: ``all`` (``VERSIONS``), ``both`` (4.9 and 5.x,
    the newest) or a comma list of spellings (one per version)."""
    if spec == "all":
        return list(VERSIONS)
    if spec == "both":
        return [V49, V5X]
    out: list[str] = []
    for name in (n.strip() for n in spec.split(",")):
        if resolve_version(name) not in map(resolve_version, out):
            out.append(name)
    return out


def is_whatif(spec: str | None) -> bool:
    """Does a ``--broker-version`` value ask for several versions side by side?"""
    return spec is not None and (spec in ("all", "both") or "," in spec)


def is_5x(version: str) -> bool:
    """A 5.x broker: its store format and load rules (V2 records, 5.x checkpoint fields ...)."""
    return resolve_version(version) != V49


def since(version: str, introduced: str) -> bool:
    """Does ``version`` follow a rule ``introduced`` in that release (R§12)?"""
    return VERSIONS.index(resolve_version(version)) >= VERSIONS.index(introduced)


def index_tag_keys(version: str) -> bool:
    """Whether ``IndexService#buildIndex`` also puts ``topic#T#TAGS`` (5.4.0 on, F§7.4)."""
    return since(version, V54)
