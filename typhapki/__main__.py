from typhapki.entry import script

script()
