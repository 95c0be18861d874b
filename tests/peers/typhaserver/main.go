// typhaserver accepts TLS connections exactly as Calico Typha's sync server does, so
// typhapki's tests can prove that Typha would accept Felix's certificate (and refuse
// the wrong ones) without running Typha itself. Test tooling, never shipped.
//
// Rules and where they come from (projectcalico/calico):
//   - TLS on as soon as any parameter is set; then all three files and CN and/or URI SAN
//     are mandatory: typha/pkg/config/config_params.go Config.Validate / requiringTLS.
//   - tls.LoadX509KeyPair(ServerCertFile, ServerKeyFile), loaded once at start;
//     calicotls.NewTLSConfig(); ClientAuth = tls.RequireAndVerifyClientCert; ClientCAs =
//     every PEM certificate in CAFile (AppendCertsFromPEM, fails if none);
//     VerifyPeerCertificate = tlsutils.CertificateVerifier(ClientCAs, ClientCN,
//     ClientURISAN): typha/pkg/syncserver/sync_server.go Server.serve.
//   - The handshake is bounded by HandshakeTimeout (default 10s):
//     sync_server.go connection.doHandshake.
//
// Configuration mirrors Typha's environment variables (flags override them):
// TYPHA_SERVERCERTFILE, TYPHA_SERVERKEYFILE, TYPHA_CAFILE, TYPHA_CLIENTCN,
// TYPHA_CLIENTURISAN, plus Calico's TLS_CIPHER_SUITES and TLS_MIN_VERSION (read as -calico-version's
// release reads them: ciphers since 3.31, the minimum version since 3.32).
//
// Output: the chosen port alone on the first stdout line, then one line per connection:
// "conn N ok cn=... uris=... version=... cipher=..." or "conn N error: <Go error>".
// -mode picks what the server enforces (typhapki's mTLS proof, docs/ferm.md): "verify"
// (the default, Typha with TLS on: RequireAndVerifyClientCert against TYPHA_CAFILE),
// "no-client-cert" (TLS, but a client certificate is neither required nor checked: the
// server certificate and key are still needed) and "plain" (Typha with TLS off: plain
// TCP, the client's first line must be "felix hello").
// Exit status: 0 when every connection was accepted, 1 when any was refused,
// 2 on a configuration or start-up error, 3 when fewer connections than -conns arrived
// within -accept-timeout.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"typhapki.test/peers/calico"
)

// listenIP is the address serve listens on (-listen).
var listenIP = "127.0.0.1"

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "typhaserver: "+format+"\n", args...)
	os.Exit(code)
}

func main() {
	port := flag.Int("port", 0, "port to listen on (0: ephemeral; the chosen port is printed first)")
	flag.StringVar(&listenIP, "listen", "127.0.0.1",
		"address to listen on: 0.0.0.0 serves every address, as Typha's hostNetwork pod does "+
			"(the emergency drill's Typha in a network namespace, tests/support/attacker.py)")
	conns := flag.Int("conns", 1, "connections to handle before exiting")
	handshakeTimeout := flag.Duration("handshake-timeout", 10*time.Second,
		"per-connection limit for the TLS handshake and client hello (Typha's HandshakeTimeout)")
	acceptTimeout := flag.Duration("accept-timeout", 30*time.Second,
		"give up when the connections have not all arrived by then")
	certFile := flag.String("servercertfile", "", "TYPHA_SERVERCERTFILE")
	keyFile := flag.String("serverkeyfile", "", "TYPHA_SERVERKEYFILE")
	caFile := flag.String("cafile", "", "TYPHA_CAFILE")
	clientCN := flag.String("clientcn", "", "TYPHA_CLIENTCN")
	clientURISAN := flag.String("clienturisan", "", "TYPHA_CLIENTURISAN")
	verbose := flag.Bool("v", false, "log the verifier's steps on stderr")
	mode := flag.String("mode", "verify", "verify, no-client-cert or plain")
	now := flag.String("now", "", "verify peers at this RFC 3339 time (a test option)")
	calicoVersion := flag.String("calico-version", "",
		"the Calico release to play, e.g. 3.30: TLS_CIPHER_SUITES is read since 3.31, "+
			"TLS_MIN_VERSION since 3.32 (default: the newest, both read)")
	flag.Parse()
	if err := calico.ClockAt(*now); err != nil {
		fail(2, "%v", err)
	}
	if err := calico.SetVersion(*calicoVersion); err != nil {
		fail(2, "%v", err)
	}
	if *mode != "verify" && *mode != "no-client-cert" && *mode != "plain" {
		fail(2, "-mode: expected verify, no-client-cert or plain, got %q", *mode)
	}
	if *mode == "plain" {
		servePlain(*port, *conns, *handshakeTimeout, *acceptTimeout)
		return
	}

	cfg := struct{ cert, key, ca, cn, uri string }{
		calico.Env(*certFile, "TYPHA_SERVERCERTFILE"),
		calico.Env(*keyFile, "TYPHA_SERVERKEYFILE"),
		calico.Env(*caFile, "TYPHA_CAFILE"),
		calico.Env(*clientCN, "TYPHA_CLIENTCN"),
		calico.Env(*clientURISAN, "TYPHA_CLIENTURISAN"),
	}
	// typha/pkg/config/config_params.go Config.Validate. Without TLS Typha would serve
	// plain TCP; these peers exist to test TLS, so that is refused here.
	if *mode == "verify" && (cfg.cert == "" || cfg.key == "" || cfg.ca == "" ||
		(cfg.cn == "" && cfg.uri == "")) {
		fail(2, "If any Felix-Typha TLS config parameters are specified, they _all_ must be"+
			" - except that either ClientCN or ClientURISAN may be left unset.")
	}

	logf := func(string, ...any) {}
	if *verbose {
		logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "typhaserver: "+format+"\n", args...)
		}
	}

	// sync_server.go Server.serve: the key pair is read once, at start.
	cert, err := tls.LoadX509KeyPair(cfg.cert, cfg.key)
	if err != nil {
		fail(2, "Failed to load certificate and key: %v", err)
	}
	tlsConfig, err := calico.NewTLSConfig()
	if err != nil {
		fail(2, "%v", err)
	}
	tlsConfig.Certificates = []tls.Certificate{cert}
	tlsConfig.ClientAuth = tls.RequireAndVerifyClientCert
	if *mode == "no-client-cert" {
		// A Typha whose chart lost TYPHA_CAFILE and the client identity: TLS, no client check.
		tlsConfig.ClientAuth = tls.NoClientCert
	}
	caPEMBlock, err := os.ReadFile(cfg.ca)
	if err != nil {
		fail(2, "Failed to read CA data: %v", err)
	}
	if *mode == "no-client-cert" {
		serve(*port, *conns, *acceptTimeout, func(n int, conn net.Conn) bool {
			return handle(n, tls.Server(conn, tlsConfig), *handshakeTimeout)
		})
		return
	}
	tlsConfig.ClientCAs = x509.NewCertPool()
	if !tlsConfig.ClientCAs.AppendCertsFromPEM(caPEMBlock) {
		fail(2, "Failed to add CA data to pool: %s", cfg.ca)
	}
	tlsConfig.VerifyPeerCertificate = calico.CertificateVerifier(
		logf, tlsConfig.ClientCAs, cfg.cn, cfg.uri)

	serve(*port, *conns, *acceptTimeout, func(n int, conn net.Conn) bool {
		return handle(n, tls.Server(conn, tlsConfig), *handshakeTimeout)
	})
}

// serve accepts `conns` connections on listenIP:port and hands each to `handle`.
// tls.Listen(...) in Typha is net.Listen plus tls.Server on each accepted connection;
// done by hand here so that Accept can have a deadline.
func serve(port, conns int, acceptTimeout time.Duration, handle func(int, net.Conn) bool) {
	ip := net.ParseIP(listenIP)
	if ip == nil {
		fail(2, "-listen: not an IP address: %q", listenIP)
	}
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		fail(2, "Failed to open listen socket: %v", err)
	}
	defer l.Close()
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	_ = l.SetDeadline(time.Now().Add(acceptTimeout))

	refused := 0
	for n := 1; n <= conns; n++ {
		conn, err := l.Accept()
		if err != nil {
			fmt.Printf("accept error: %v\n", err)
			os.Exit(3)
		}
		if !handle(n, conn) {
			refused++
		}
	}
	if refused > 0 {
		os.Exit(1)
	}
}

// servePlain is Typha with TLS off: it reads the client's hello as plain bytes (real
// Typha decodes a gob message and drops a connection whose first bytes are not one,
// as a TLS ClientHello is not).
func servePlain(port, conns int, timeout, acceptTimeout time.Duration) {
	serve(port, conns, acceptTimeout, func(n int, conn net.Conn) bool {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 4096)
		k, err := conn.Read(buf)
		if err != nil || strings.TrimSpace(string(buf[:k])) != "felix hello" {
			fmt.Printf("conn %d error: not a plaintext hello (%d bytes)\n", n, k)
			return false
		}
		_, _ = conn.Write([]byte("typha hello\n"))
		fmt.Printf("conn %d ok plain\n", n)
		return true
	})
}

// handle completes the TLS handshake and a two-line exchange, and prints one outcome
// line. Real Typha reads the client's hello first (connection.doHandshake); here Typha
// speaks first so that a refused client never leaves unread data behind, which would
// make the kernel answer close() with a RST that can swallow the TLS alert the client
// must see.
func handle(n int, conn *tls.Conn, timeout time.Duration) bool {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := conn.Handshake(); err != nil {
		fmt.Printf("conn %d error: %s\n", n, oneLine(err))
		return false
	}
	if _, err := conn.Write([]byte("typha hello\n")); err != nil {
		fmt.Printf("conn %d error: %s\n", n, oneLine(err))
		return false
	}
	hello, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Printf("conn %d error: %s\n", n, oneLine(err))
		return false
	}
	if strings.TrimSpace(hello) != "felix hello" {
		fmt.Printf("conn %d error: unexpected message from client %q\n", n, hello)
		return false
	}
	state := conn.ConnectionState()
	cn, uris := "", []string{}
	if len(state.PeerCertificates) > 0 { // none in -mode no-client-cert
		leaf := state.PeerCertificates[0]
		cn = leaf.Subject.CommonName
		for _, u := range leaf.URIs {
			uris = append(uris, u.String())
		}
	}
	fmt.Printf("conn %d ok cn=%q uris=%s version=%s cipher=%s\n", n, cn,
		strings.Join(uris, ","), versionName(state.Version), tls.CipherSuiteName(state.CipherSuite))
	return true
}

func oneLine(err error) string {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
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
