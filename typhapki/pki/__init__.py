"""Certificates: profiles, the on-disk store, verification, issuance and CA rotation."""
