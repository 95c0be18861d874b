// Package calico reproduces, with the Go standard library only, the two pieces of
// Calico that decide whether a Typha <-> Felix TLS connection is accepted:
//
//   - NewTLSConfig: projectcalico/calico crypto/pkg/tls/tls.go (NewTLSConfig,
//     DefaultCiphers, ParseTLSCiphers, ParseTLSVersion; non-FIPS build, see
//     crypto/pkg/tls/nonfipstls.go).
//   - CertificateVerifier: projectcalico/calico typha/pkg/tlsutils/tlsutils.go.
//
// Logging (logrus in Calico) is replaced by a plain function; the rules are unchanged.
// This is test tooling for typhapki, never shipped.
package calico

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// tls12Ciphers: crypto/pkg/tls/tls.go `tls12Ciphers`, in Calico's order (Calico lists
// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 twice; the duplicate is harmless and kept out here).
var tls12Ciphers = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
}

// tls13Ciphers: crypto/pkg/tls/tls.go `tls13Ciphers` (Go ignores these in
// Config.CipherSuites: TLS 1.3 suites are not configurable, but Calico lists them).
var tls13Ciphers = []uint16{
	tls.TLS_AES_256_GCM_SHA384,
	tls.TLS_CHACHA20_POLY1305_SHA256,
	tls.TLS_AES_128_GCM_SHA256,
}

// legacyCiphers: crypto/pkg/tls/tls.go `legacyCiphers`, accepted only when named in
// TLS_CIPHER_SUITES.
var legacyCiphers = []uint16{
	tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
}

// DefaultCiphers: crypto/pkg/tls/tls.go DefaultCiphers.
func DefaultCiphers() []uint16 {
	out := append([]uint16{}, tls13Ciphers...)
	return append(out, tls12Ciphers...)
}

// ParseTLSCiphers: crypto/pkg/tls/tls.go ParseTLSCiphers (comma-separated Go names).
func ParseTLSCiphers(ciphers string) ([]uint16, error) {
	if ciphers == "" {
		return DefaultCiphers(), nil
	}
	supported := map[string]uint16{}
	for _, c := range append(DefaultCiphers(), legacyCiphers...) {
		supported[tls.CipherSuiteName(c)] = c
	}
	var result []uint16
	for _, name := range strings.Split(ciphers, ",") {
		name = strings.TrimSpace(name)
		value, ok := supported[name]
		if !ok {
			return nil, fmt.Errorf("unsupported cipher: %s", name)
		}
		result = append(result, value)
	}
	return result, nil
}

// ParseTLSVersion: crypto/pkg/tls/tls.go ParseTLSVersion.
func ParseTLSVersion(version string) (uint16, error) {
	switch version {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	default:
		return 0, fmt.Errorf("unsupported TLS version: %s (supported versions: 1.2, 1.3)", version)
	}
}

// Version is the Calico release the peers play (the -calico-version flag): TLS_CIPHER_SUITES
// exists since 3.31 and TLS_MIN_VERSION since 3.32; earlier releases never read them and
// keep Calico's defaults. The zero value is the newest release: both are honoured.
var Version = struct{ Major, Minor int }{}

// SetVersion sets Version from "3.30", "3.31.2" or "v3.32.1" ("" leaves the newest).
func SetVersion(text string) error {
	if text == "" {
		return nil
	}
	var major, minor int
	parts := strings.SplitN(strings.TrimPrefix(text, "v"), ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("-calico-version: expected MAJOR.MINOR[.PATCH], got %q", text)
	}
	if _, err := fmt.Sscanf(parts[0]+" "+parts[1], "%d %d", &major, &minor); err != nil {
		return fmt.Errorf("-calico-version: expected MAJOR.MINOR[.PATCH], got %q", text)
	}
	Version.Major, Version.Minor = major, minor
	return nil
}

// Since reports whether the played release is major.minor or later.
func Since(major, minor int) bool {
	if Version.Major == 0 {
		return true
	}
	return Version.Major > major || (Version.Major == major && Version.Minor >= minor)
}

// NewTLSConfig: crypto/pkg/tls/tls.go NewTLSConfig. TLS 1.2 minimum unless
// TLS_MIN_VERSION=1.3, TLS 1.3 maximum, cipher suites from TLS_CIPHER_SUITES or the
// defaults (ECDHE with AES-GCM / ChaCha20, plus three ECDHE CBC suites). A release
// before 3.31 (SetVersion) ignores TLS_CIPHER_SUITES, one before 3.32 TLS_MIN_VERSION.
func NewTLSConfig() (*tls.Config, error) {
	cipherText, versionText := "", ""
	if Since(3, 31) {
		cipherText = os.Getenv("TLS_CIPHER_SUITES")
	}
	if Since(3, 32) {
		versionText = os.Getenv("TLS_MIN_VERSION")
	}
	ciphers, err := ParseTLSCiphers(cipherText)
	if err != nil {
		return nil, fmt.Errorf("failed to create TLS Config: %w", err)
	}
	minVersion, err := ParseTLSVersion(versionText)
	if err != nil {
		// Calico logs a warning and carries on with TLS 1.2.
		minVersion = tls.VersionTLS12
	}
	return &tls.Config{
		MinVersion:   minVersion,
		MaxVersion:   tls.VersionTLS13,
		CipherSuites: ciphers,
		Time:         Clock, // nil: the real clock
	}, nil
}

// Clock, when set (the peers' -now flag), is the time both sides verify at: Go reads
// the clock through the vDSO, so faketime cannot move it. Not in Calico: a test option.
var Clock func() time.Time

// ClockAt sets Clock from an RFC 3339 time ("" leaves the real clock).
func ClockAt(when string) error {
	if when == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return fmt.Errorf("-now: %w", err)
	}
	Clock = func() time.Time { return t }
	return nil
}

// CertificateVerifier: typha/pkg/tlsutils/tlsutils.go CertificateVerifier, used as
// tls.Config.VerifyPeerCertificate by both Typha (server) and Felix (client).
//
// On Typha's side Go has already verified the chain against ClientCAs with key usage
// clientAuth, so verifiedChains is set and only the identity is checked here. On Felix's
// side InsecureSkipVerify leaves verifiedChains empty, so the chain is verified here with
// x509.VerifyOptions{} whose default KeyUsages is serverAuth, and with no hostname check.
func CertificateVerifier(logf func(string, ...any), roots *x509.CertPool, requiredCN, requiredURISAN string) func([][]byte, [][]*x509.Certificate) error {
	return func(rawCerts [][]byte, verifiedChains [][]*x509.Certificate) error {
		if len(verifiedChains) == 0 {
			logf("Verify certificate chain signing")
			certs := make([]*x509.Certificate, len(rawCerts))
			for i, asn1Data := range rawCerts {
				cert, err := x509.ParseCertificate(asn1Data)
				if err != nil {
					return errors.New("Failed to parse certificate: " + err.Error())
				}
				certs[i] = cert
			}
			opts := x509.VerifyOptions{
				Roots:         roots,
				Intermediates: x509.NewCertPool(),
			}
			if Clock != nil {
				opts.CurrentTime = Clock()
			}
			for i, cert := range certs {
				if i == 0 {
					continue
				}
				opts.Intermediates.AddCert(cert)
			}
			var err error
			verifiedChains, err = certs[0].Verify(opts)
			if err != nil {
				return err
			}
		}

		leafCert := verifiedChains[0][0]

		requiredCNFound := false
		if requiredCN != "" {
			// Exact, case-sensitive comparison with the subject CN.
			requiredCNFound = leafCert.Subject.CommonName == requiredCN
		}
		requiredURIFound := false
		if requiredURISAN != "" {
			for _, uri := range leafCert.URIs {
				logf("Checking URI %s", uri)
				if uri.String() == requiredURISAN {
					requiredURIFound = true
					break
				}
			}
		}

		if requiredCN != "" && requiredURISAN != "" {
			if !requiredCNFound && !requiredURIFound {
				return errors.New("peer certificate does not have required CN or URI SAN")
			}
		} else if requiredCN != "" {
			if !requiredCNFound {
				return errors.New("peer certificate does not have required CN")
			}
		} else if requiredURISAN != "" {
			if !requiredURIFound {
				return errors.New("peer certificate does not have required URI SAN")
			}
		}
		return nil
	}
}

// Env returns the value of a flag when set, else of the environment variable of the
// same meaning (the peers mirror Calico's variable names).
func Env(flagValue, variable string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(variable)
}
