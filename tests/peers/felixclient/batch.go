// batch.go: one process plays many Felixes (-batch), for the fleet drill
// (tests/support/drill.py). Each stdin line is one Felix's reconnect, as JSON:
//
//	{"id": "...", "addrs": ["127.0.0.1:P", ...], "tries": N, "interval_ms": 100,
//	 "tls": true, "cert": F, "key": F, "ca": F, "cn": "calico-typha", "uri": ""}
//
// The Felix tries the addresses in the order given (the drill puts this node's Typha
// first, as Felix does), cycling through them for `tries` attempts, `interval_ms`
// apart: Felix's retry budget since Calico 3.31 is 2 x max(Typhas, 3) tries, 100 ms
// apart (typha/pkg/syncclient/sync_client.go). With "tls" it dials as the single mode
// of main.go does, reading its files again on every attempt (Felix re-reads them on
// each connect); without, it speaks the plain hello a plain Typha expects
// (tests/peers/typhaserver -mode plain).
//
// With "exits" the Felix is Calico 3.30 or older: it does not reconnect in-process. A
// lost connection, and each failed try after it, makes the Felix process exit; runit
// starts it again inside the calico-node pod (the pod never restarts) and the new
// process reads its files at start. The outcome counts those exits. (Since 3.31,
// PR #10306, the client reconnects in-process and re-reads its files on each try:
// "exits" is 0.) One JSON line a request on stdout:
//
//	{"id": "...", "ok": true, "addr": "127.0.0.1:P", "attempts": 1, "exits": 0, "errors": []}
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"typhapki.test/peers/calico"
)

type felixRequest struct {
	ID         string   `json:"id"`
	Addrs      []string `json:"addrs"`
	Tries      int      `json:"tries"`
	IntervalMs int      `json:"interval_ms"`
	TLS        bool     `json:"tls"`
	Cert       string   `json:"cert"`
	Key        string   `json:"key"`
	CA         string   `json:"ca"`
	CN         string   `json:"cn"`
	URI        string   `json:"uri"`
	Exits      bool     `json:"exits"`
}

type felixOutcome struct {
	ID       string   `json:"id"`
	OK       bool     `json:"ok"`
	Addr     string   `json:"addr"`
	Attempts int      `json:"attempts"`
	Exits    int      `json:"exits"`
	Errors   []string `json:"errors"`
}

func runBatch(in io.Reader, out io.Writer, parallel int, timeout time.Duration) {
	if parallel < 1 {
		parallel = 1
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<16), 1<<20)
	var requests []felixRequest
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		var req felixRequest
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			fail(2, "-batch: a line that is no request: %v", err)
		}
		requests = append(requests, req)
	}
	if err := scanner.Err(); err != nil {
		fail(2, "-batch: %v", err)
	}
	outcomes := make([]felixOutcome, len(requests))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Add(1)
		slots <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-slots }()
			outcomes[i] = reconnect(requests[i], timeout)
		}(i)
	}
	wg.Wait()
	encoder := json.NewEncoder(out)
	for _, outcome := range outcomes {
		if err := encoder.Encode(outcome); err != nil {
			fail(2, "-batch: %v", err)
		}
	}
}

// reconnect is one Felix's reconnect: its tries over the Typhas it found.
func reconnect(req felixRequest, timeout time.Duration) felixOutcome {
	outcome := felixOutcome{ID: req.ID, Errors: []string{}}
	if len(req.Addrs) == 0 {
		outcome.Errors = append(outcome.Errors, "no Typha endpoint")
		return outcome
	}
	tries := req.Tries
	if tries < 1 {
		tries = 1
	}
	for n := 0; n < tries; n++ {
		if n > 0 && req.IntervalMs > 0 {
			time.Sleep(time.Duration(req.IntervalMs) * time.Millisecond)
		}
		addr := req.Addrs[n%len(req.Addrs)]
		if req.Exits {
			// 3.30: the loss (or the failed try before) ended the process; this try is
			// a new one, started by runit, reading its files afresh (dialTLS does).
			outcome.Exits++
		}
		outcome.Attempts++
		outcome.Addr = addr
		var err error
		if req.TLS {
			err = dialTLS(req, addr, timeout)
		} else {
			err = dialPlain(addr, timeout)
		}
		if err == nil {
			outcome.OK = true
			return outcome
		}
		outcome.Errors = append(outcome.Errors,
			fmt.Sprintf("%s: %s", addr, strings.ReplaceAll(err.Error(), "\n", " ")))
	}
	return outcome
}

func dialPlain(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("felix hello\n")); err != nil {
		return err
	}
	greeting, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(greeting) != "typha hello" {
		return fmt.Errorf("unexpected message from Typha %q", greeting)
	}
	return nil
}

func dialTLS(req felixRequest, addr string, timeout time.Duration) error {
	if req.Key == "" || req.Cert == "" || req.CA == "" || (req.CN == "" && req.URI == "") {
		return fmt.Errorf("If any Felix-Typha TLS options are specified, they _all_ must be" +
			" - except that either ServerCN or ServerURISAN may be left unset.")
	}
	cert, err := tls.LoadX509KeyPair(req.Cert, req.Key)
	if err != nil {
		return fmt.Errorf("Failed to load certificate and key: %v", err)
	}
	tlsConfig, err := calico.NewTLSConfig()
	if err != nil {
		return err
	}
	tlsConfig.Certificates = []tls.Certificate{cert}
	tlsConfig.MinVersion = tls.VersionTLS12
	tlsConfig.InsecureSkipVerify = true
	caPEMBlock, err := os.ReadFile(req.CA)
	if err != nil {
		return fmt.Errorf("Failed to read CA data: %v", err)
	}
	tlsConfig.RootCAs = x509.NewCertPool()
	if !tlsConfig.RootCAs.AppendCertsFromPEM(caPEMBlock) {
		return fmt.Errorf("Failed to add CA data to pool: %s", req.CA)
	}
	tlsConfig.VerifyPeerCertificate = calico.CertificateVerifier(
		func(string, ...any) {}, tlsConfig.RootCAs, req.CN, req.URI)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, tlsConfig)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	greeting, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(greeting) != "typha hello" {
		return fmt.Errorf("unexpected message from Typha %q", greeting)
	}
	_, err = conn.Write([]byte("felix hello\n"))
	return err
}
