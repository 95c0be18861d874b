# @summary How a node's certificate set is issued.
#
# * `local`: `typhapki issue` signs with the cluster CA on the node (lab; the CA key
#   reaches every node of the cluster).
# * `shipped`: the set is issued elsewhere and shipped by Puppet (`typhapki install --from`).
# * `cfssl`: the node makes its keys and asks a cfssl server to sign (`--signer cfssl`).
type Typhapki::Mode = Enum['local', 'shipped', 'cfssl']
