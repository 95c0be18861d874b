module typhapki.test/peers

go 1.19
