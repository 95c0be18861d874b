"""Every shared option is declared once, as the field of its group's record
(typhapki/options.py), and the records that carry options take them from there:
`PkiOptions`, `SignerOptions` and hiera's `TyphaSettings`. A field declared a second
time (in the table, or again in a record), or missing from a record, fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, assert_type

import pytest
import yaml

from tests.settings.test_hiera_keys import SAMPLES
from typhapki import options
from typhapki.errors import ConfigError
from typhapki.inventory.hiera import TyphaSettings, load_cluster
from typhapki.options import OptionField
from typhapki.record import fields
from typhapki.settings.pki import OPTION_NAMES as PKI_NAMES
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import OPTION_NAMES as SIGNER_NAMES
from typhapki.settings.signer import SignerOptions

# Each record, and the groups of shared options it holds.
RECORDS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (PkiOptions, ("pki",)),
    (SignerOptions, ("signer",)),
    (TyphaSettings, ("pki", "signer", "proof", "wiring")),
)


def test_every_shared_option_is_declared_once() -> None:
    """One name, one flag, one group record: the table is the group records' fields."""
    names = [o.name for o in options.OPTIONS]
    assert len(names) == len(set(names)) == len(options.BY_NAME)
    flags = [o.flag for o in options.OPTIONS]
    assert len(flags) == len(set(flags))
    declared = [f.name for _, cls in options.GROUPS for f in fields(cls)]
    assert declared == names
    for group_name, cls in options.GROUPS:
        assert all(isinstance(f, OptionField) for f in fields(cls)), cls
        assert options.group(group_name) == options.options_of(cls, group_name)


@pytest.mark.parametrize(("record", "groups"), RECORDS, ids=lambda r: getattr(r, "__name__", ""))
def test_each_record_takes_its_options_from_their_declaration(
    record: type, groups: tuple[str, ...]
) -> None:
    """The record's options are its groups' fields, inherited as declared (a field
    declared again in the record replaces the option and moves it); its own fields are
    no option's."""
    found = fields(record)
    inherited = [f.name for f in found if isinstance(f, OptionField)]
    expected = {o.name for g in groups for o in options.group(g)}
    assert set(inherited) == expected, "an option is missing"
    for g in groups:
        order = [o.name for o in options.group(g)]
        assert [n for n in inherited if n in order] == order, f"{g}: declared again"
    own = {f.name for f in found if not isinstance(f, OptionField)}
    assert not own & set(options.BY_NAME), "an option declared again as a record's field"


def test_option_names_are_the_groups() -> None:
    """What the command line, the node configuration and hiera fill by name."""
    assert tuple(o.name for o in options.group("pki")) == PKI_NAMES
    assert tuple(o.name for o in options.group("signer")) == SIGNER_NAMES


def test_the_fields_keep_their_types() -> None:
    """Declared once, still typed: mypy (over tests too) checks these assertions."""
    pki = PkiOptions(days=3, key_owner="root")
    assert_type(pki.days, int | None)
    assert_type(pki.key_owner, str | None)
    assert_type(pki.cluster_renew, int | None)
    signer = SignerOptions(cfssl_allow_http=True, cfssl_auth_key=Path("k"))
    assert_type(signer.cfssl_allow_http, bool)
    assert_type(signer.cfssl_auth_key, Path | None)
    assert_type(signer.cfssl_timeout, float | None)
    typha = TyphaSettings(typha_address="h:1", tls_stage="switch", port=5473)
    assert_type(typha.typha_address, str | None)
    assert_type(typha.tls_stage, str | None)
    assert_type(typha.port, int | None)
    assert (pki.days, signer.cfssl_allow_http, typha.port) == (3, True, 5473)


def _cluster_typha(path: Path, typha: dict[str, Any]) -> TyphaSettings:
    entry = {"cluster_nodes": ["kube1001.example"], "typha": typha}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"c": entry}}}))
    return load_cluster(path, "c").typha


def test_typha_takes_every_option_marked_hiera(tmp_path: Path) -> None:
    """Each option marked `hiera` is a typha: key, read into the field of its name."""
    marked = {o.name for o in options.OPTIONS if o.hiera}
    assert marked == set(SAMPLES)
    typha = _cluster_typha(tmp_path / "h.yaml", {n: SAMPLES[n][0] for n in marked})
    for name in marked:
        assert getattr(typha, name) == SAMPLES[name][0], name
        assert typha.sources[name].endswith(f".typha.{name}"), name


@pytest.mark.parametrize("name", sorted(o.name for o in options.OPTIONS if not o.hiera))
def test_typha_refuses_every_other_option(tmp_path: Path, name: str) -> None:
    """An option not marked `hiera` is refused under typha: (a secret, this node's own
    name, a flag, another command's setting), naming the key."""
    with pytest.raises(ConfigError, match=rf"typha\.{name}: (unknown key|secrets never)"):
        _cluster_typha(tmp_path / "h.yaml", {name: "x"})
