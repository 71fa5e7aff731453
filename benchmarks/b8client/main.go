// Command b8client sends POSTs to the extender the way kube-scheduler does: its transport is
// built exactly as k8s.io/kubernetes pkg/scheduler/extender.go makeTransport builds it
// (restclient.TLSConfigFor, then utilnet.SetTransportDefaults, which offers h2 through ALPN
// and keeps Go's default of 2 idle connections per host), so the connections the server sees
// are the ones kube-scheduler would open. It prints one JSON line: what it saw and spent.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	restclient "k8s.io/client-go/rest"
)

func makeTransport(certFile, keyFile, caFile, serverName string) (http.RoundTripper, error) {
	var cfg restclient.Config
	cfg.TLSClientConfig.ServerName = serverName
	cfg.TLSClientConfig.CertFile = certFile
	cfg.TLSClientConfig.KeyFile = keyFile
	cfg.TLSClientConfig.CAFile = caFile
	tlsConfig, err := restclient.TLSConfigFor(&cfg)
	if err != nil {
		return nil, err
	}
	return utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsConfig}), nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func main() {
	url := flag.String("url", "", "https://host:port/filter")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	ca := flag.String("ca", "", "CA of the server's certificate")
	serverName := flag.String("server-name", "", "TLS server name")
	bodyFile := flag.String("body", "", "file holding the request body")
	total := flag.Int("n", 2000, "requests")
	inflight := flag.Int("concurrency", 32, "requests in flight")
	warmup := flag.Int("warmup", 200, "untimed requests first, then a line \"warm\" on stdout and a wait for a line on stdin")
	timeout := flag.Duration("timeout", 30*time.Second, "kube-scheduler's httpTimeout")
	flag.Parse()

	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	transport, err := makeTransport(*cert, *key, *ca, *serverName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client := &http.Client{Transport: transport, Timeout: *timeout}

	var next, failed, newConns atomic.Int64
	var mu sync.Mutex
	protos := map[string]int{}
	firstError := ""
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			newConns.Add(1)
		}
	}}
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, *url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed.Add(1)
			if firstError == "" {
				firstError = err.Error()
			}
			return
		}
		protos[resp.Proto]++
	}

	batch := func(n int) {
		next.Store(0)
		var wg sync.WaitGroup
		for w := 0; w < *inflight; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					send()
				}
			}()
		}
		wg.Wait()
	}
	// Warm, as a long-running kube-scheduler is: its connections are open already.
	batch(*warmup)
	fmt.Println("warm")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	failed.Store(0)
	newConns.Store(0)
	protos = map[string]int{}
	cpu0, t0 := cpuSeconds(), time.Now()
	batch(*total)
	seconds, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"requests": *total, "failed": failed.Load(), "first_error": firstError,
		"seconds": seconds, "cpu_seconds": cpu, "protocols": protos,
		"new_connections": newConns.Load(),
	})
}
