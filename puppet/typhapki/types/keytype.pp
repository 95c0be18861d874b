# @summary Key types `typhapki issue --key-type` accepts.
type Typhapki::KeyType = Enum['ecdsa-p256', 'ecdsa-p384', 'rsa-2048', 'rsa-3072', 'rsa-4096']
