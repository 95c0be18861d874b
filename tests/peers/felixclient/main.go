// felixclient connects to Typha exactly as Calico Felix (calico-node, confd) does, so
// typhapki's tests can prove that Felix would accept Typha's certificate (and refuse
// the wrong ones) without running Felix itself. Test tooling, never shipped.
//
// Rules and where they come from (projectcalico/calico typha/pkg/syncclient/sync_client.go):
//   - Options.validate: if any TLS option is set, KeyFile, CertFile and CAFile must all
//     be, and ServerCN and/or ServerURISAN.
//   - SyncerClient.connect: tls.LoadX509KeyPair(CertFile, KeyFile) on every connect;
//     calicotls.NewTLSConfig() with MinVersion TLS 1.2; InsecureSkipVerify = true (no
//     hostname/IP check); RootCAs = every certificate in CAFile; VerifyPeerCertificate =
//     tlsutils.CertificateVerifier(RootCAs, ServerCN, ServerURISAN), which verifies the
//     chain itself with x509.VerifyOptions{} (default key usage: serverAuth);
//     tls.DialWithDialer(&net.Dialer{Timeout: 10s}, ...).
//   - Go's client presents its certificate only if the server's CertificateRequest
//     lists the certificate's issuer (crypto/tls getClientCertificate ->
//     CertificateRequestInfo.SupportsCertificate); otherwise it sends none.
//
// Configuration mirrors Felix's environment variables (flags override them):
// FELIX_TYPHACERTFILE, FELIX_TYPHAKEYFILE, FELIX_TYPHACAFILE, FELIX_TYPHACN,
// FELIX_TYPHAURISAN, plus Calico's TLS_CIPHER_SUITES and TLS_MIN_VERSION (read as -calico-version's
// release reads them: ciphers since 3.31, the minimum version since 3.32).
//
// Exit status 0 and "ok ..." on stdout when the connection was accepted by both sides;
// 1 and "felixclient: <Go error>" on stderr when either side refused it; 2 on a
// configuration error (bad files, missing options). With -batch one process plays many
// Felixes, each reconnecting within Felix's retry budget (batch.go).
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"typhapki.test/peers/calico"
)

func fail(code int, format string, args ...any) {
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	fmt.Fprintf(os.Stderr, "felixclient: %s\n", msg)
	os.Exit(code)
}

func main() {
	addr := flag.String("addr", "", "Typha address host:port (FELIX_TYPHAADDR)")
	timeout := flag.Duration("timeout", 10*time.Second,
		"dial timeout (Felix uses 10s) and limit for the whole exchange")
	certFile := flag.String("typhacertfile", "", "FELIX_TYPHACERTFILE")
	keyFile := flag.String("typhakeyfile", "", "FELIX_TYPHAKEYFILE")
	caFile := flag.String("typhacafile", "", "FELIX_TYPHACAFILE")
	serverCN := flag.String("typhacn", "", "FELIX_TYPHACN")
	serverURISAN := flag.String("typhaurisan", "", "FELIX_TYPHAURISAN")
	forceClientCert := flag.Bool("force-client-cert", false,
		"present the client certificate even when Typha's CA list does not name its issuer "+
			"(NOT what Felix does: lets a test reach Typha's own chain verification)")
	maxVersion := flag.String("max-version", "",
		"cap the TLS version (1.2 or 1.3); an earlier crypto/pkg/tls/tls.go "+
			"NewTLSConfig(fipsMode) capped FIPS mode at TLS 1.2")
	verbose := flag.Bool("v", false, "log the verifier's steps on stderr")
	now := flag.String("now", "", "verify peers at this RFC 3339 time (a test option)")
	calicoVersion := flag.String("calico-version", "",
		"the Calico release to play, e.g. 3.30: TLS_CIPHER_SUITES is read since 3.31, "+
			"TLS_MIN_VERSION since 3.32 (default: the newest, both read)")
	batch := flag.Bool("batch", false,
		"play many Felixes: one JSON request a line on stdin, one JSON outcome a line on "+
			"stdout (batch.go); the other flags then do not apply")
	parallel := flag.Int("parallel", 32, "with -batch: Felixes connecting at once")
	flag.Parse()
	if err := calico.ClockAt(*now); err != nil {
		fail(2, "%v", err)
	}
	if err := calico.SetVersion(*calicoVersion); err != nil {
		fail(2, "%v", err)
	}
	if *batch {
		runBatch(os.Stdin, os.Stdout, *parallel, *timeout)
		return
	}

	target := calico.Env(*addr, "FELIX_TYPHAADDR")
	if target == "" {
		fail(2, "no Typha address: use -addr or FELIX_TYPHAADDR")
	}
	opts := struct{ cert, key, ca, cn, uri string }{
		calico.Env(*certFile, "FELIX_TYPHACERTFILE"),
		calico.Env(*keyFile, "FELIX_TYPHAKEYFILE"),
		calico.Env(*caFile, "FELIX_TYPHACAFILE"),
		calico.Env(*serverCN, "FELIX_TYPHACN"),
		calico.Env(*serverURISAN, "FELIX_TYPHAURISAN"),
	}
	// sync_client.go Options.validate (Felix without TLS would dial plain TCP; these
	// peers exist to test TLS, so that is refused here).
	if opts.key == "" || opts.cert == "" || opts.ca == "" || (opts.cn == "" && opts.uri == "") {
		fail(2, "If any Felix-Typha TLS options are specified, they _all_ must be"+
			" - except that either ServerCN or ServerURISAN may be left unset.")
	}

	logf := func(string, ...any) {}
	if *verbose {
		logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "felixclient: "+format+"\n", args...)
		}
	}

	cert, err := tls.LoadX509KeyPair(opts.cert, opts.key)
	if err != nil {
		fail(2, "Failed to load certificate and key: %v", err)
	}
	tlsConfig, err := calico.NewTLSConfig()
	if err != nil {
		fail(2, "%v", err)
	}
	tlsConfig.Certificates = []tls.Certificate{cert}
	tlsConfig.MinVersion = tls.VersionTLS12
	if *maxVersion != "" {
		v, err := calico.ParseTLSVersion(*maxVersion)
		if err != nil {
			fail(2, "%v", err)
		}
		tlsConfig.MaxVersion = v
	}
	// sync_client.go: "Set InsecureSkipVerify true, because when it's false crypto/tls
	// insists on verifying the server's hostname or IP address ... We will do
	// certificate chain verification ourselves inside CertificateVerifier."
	tlsConfig.InsecureSkipVerify = true
	caPEMBlock, err := os.ReadFile(opts.ca)
	if err != nil {
		fail(2, "Failed to read CA data: %v", err)
	}
	tlsConfig.RootCAs = x509.NewCertPool()
	if !tlsConfig.RootCAs.AppendCertsFromPEM(caPEMBlock) {
		fail(2, "Failed to add CA data to pool: %s", opts.ca)
	}
	tlsConfig.VerifyPeerCertificate = calico.CertificateVerifier(
		logf, tlsConfig.RootCAs, opts.cn, opts.uri)
	if *forceClientCert {
		tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}
	}

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: *timeout}, "tcp", target, tlsConfig)
	if err != nil {
		fail(1, "%v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(*timeout))

	// With TLS 1.3 the client's handshake is complete before Typha has checked the
	// client certificate: Typha's verdict arrives on the first read.
	greeting, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fail(1, "%v", err)
	}
	if strings.TrimSpace(greeting) != "typha hello" {
		fail(1, "unexpected message from Typha %q", greeting)
	}
	if _, err := conn.Write([]byte("felix hello\n")); err != nil {
		fail(1, "%v", err)
	}
	state := conn.ConnectionState()
	leaf := state.PeerCertificates[0]
	uris := make([]string, 0, len(leaf.URIs))
	for _, u := range leaf.URIs {
		uris = append(uris, u.String())
	}
	fmt.Printf("ok cn=%q uris=%s version=%s cipher=%s\n", leaf.Subject.CommonName,
		strings.Join(uris, ","), versionName(state.Version), tls.CipherSuiteName(state.CipherSuite))
}

func versionName(v uint16) string {
	switch v {
	case tls.VersionTLS12:
		return "TLS1.2"
	case tls.VersionTLS13:
		return "TLS1.3"
	}
	return fmt.Sprintf("0x%04x", v)
}
