# @summary A cfssl 1.2 label or profile name: word characters only.
#
# A `multirootca` label is an INI section name (`[ cluster-2025 ]` is an invalid
# configuration there); typhapki holds profile names to the same rule (docs/issuance.md).
type Typhapki::CfsslName = Pattern[/\A[A-Za-z0-9_]+\z/]
