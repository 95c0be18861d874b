"""One bad value placed at one source, for the provenance tests
(tests/test_provenance.py, tests/pki/signers/test_factory.py): the node
configuration file (under `defaults:` or `commands: COMMAND:`) or a hiera cluster's
`typha:` mapping; a flag is the test's own."""

from __future__ import annotations

from pathlib import Path

SOURCES = ("flag", "defaults", "commands", "hiera")
HIERA = """kubernetes::clusters:
  main:
    prod:
      cluster_nodes: [node1.example.org]
      typha:
        {key}: '{value}'
"""
GOOD_HIERA = HIERA.format(key="typha_cn", value="typha-prod")


def place(
    base: Path, source: str, command: str, key: str, option: str, value: str
) -> tuple[Path, Path]:
    """Write BASE/typhapki.yaml and BASE/hiera.yaml (cluster `prod`) with `value` at
    `source`: the file spells the option `key`, hiera `option`. Returns both paths."""
    config, hiera = base / "typhapki.yaml", base / "hiera.yaml"
    config.write_text(
        {
            "defaults": f"defaults:\n  {key}: '{value}'\n",
            "commands": f"commands:\n  {command}:\n    {key}: '{value}'\n",
        }.get(source, "defaults:\n  role: both\n")
    )
    config.chmod(0o600)
    hiera.write_text(HIERA.format(key=option, value=value) if source == "hiera" else GOOD_HIERA)
    return config, hiera
