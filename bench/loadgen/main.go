// Command loadgen drives WeaselDB, etcd's JSON gateway or a no-op server with the same
// compiled HTTP/1.1 client, so that a benchmark measures the server, not the client.
//
//	loadgen -addr 127.0.0.1:8080 -workload weasel -c 64 -d 8s            # closed loop
//	loadgen -addr 127.0.0.1:2379 -workload etcd -c 64 -d 8s -rate 3000  # open loop
//	loadgen -addr 127.0.0.1:8090 -workload reader-get -keys 10000 -c 64  # point reads
//	loadgen -addr 127.0.0.1:8080 -cacert ca.crt -token-file token -c 64  # TLS and a token
//
// Closed loop: each of c connections sends its next request when the answer arrives.
// Open loop: requests are due at a fixed rate whatever happens; latency counts from when a
// request was due, not when it was sent, so a stalled server cannot hide its queue
// (coordinated omission). Prints one JSON object on stdout.
//
// Workload (bench/README and ../shared/spec/performance.md): a point read of a key and a
// write of the same key, 16-byte keys drawn uniformly from -keys, 100-byte values. The
// read version (WeaselDB) or compared revision (etcd) is the newest any answer reported.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type workload interface {
	method() string
	path(rng *rand.Rand) string
	body(rng *rand.Rand, newest uint64) []byte
	// outcome of an answer, and the newest version/revision it reports (0: none).
	outcome(status int, body []byte) (string, uint64)
}

type keys struct {
	encoded []string
	value   string
}

func newKeys(count int) keys {
	rng := rand.New(rand.NewSource(1))
	k := keys{encoded: make([]string, count)}
	for i := range k.encoded {
		raw := make([]byte, 16)
		rng.Read(raw)
		k.encoded[i] = base64.StdEncoding.EncodeToString(raw)
	}
	k.value = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("v"), 100))
	return k
}

type weasel struct{ keys }

func (weasel) method() string             { return "POST" }
func (weasel) path(rng *rand.Rand) string { return "/v1/commit" }

func (w weasel) body(rng *rand.Rand, newest uint64) []byte {
	key := w.encoded[rng.Intn(len(w.encoded))]
	return []byte(`{"read_version":` + strconv.FormatUint(newest, 10) +
		`,"preconditions":[{"type":"point_read","key":"` + key +
		`"}],"operations":[{"type":"write","key":"` + key + `","value":"` + w.value + `"}]}`)
}

func (w weasel) outcome(status int, body []byte) (string, uint64) {
	if status != 200 {
		return "error", 0
	}
	version := numberAfter(body, []byte(`"version":`))
	if bytes.Contains(body, []byte(`"status":"committed"`)) {
		return "committed", version
	}
	return "not_committed", version
}

type etcd struct{ keys }

func (etcd) method() string             { return "POST" }
func (etcd) path(rng *rand.Rand) string { return "/v3/kv/txn" }

func (e etcd) body(rng *rand.Rand, newest uint64) []byte {
	key := e.encoded[rng.Intn(len(e.encoded))]
	// The key was not modified after the newest revision seen: the same precondition as
	// WeaselDB's point read at that version.
	return []byte(`{"compare":[{"key":"` + key + `","target":"MOD","result":"LESS","mod_revision":"` +
		strconv.FormatUint(newest+1, 10) + `"}],"success":[{"request_put":{"key":"` + key +
		`","value":"` + e.value + `"}}]}`)
}

func (e etcd) outcome(status int, body []byte) (string, uint64) {
	if status != 200 {
		return "error", 0
	}
	revision := numberAfter(body, []byte(`"revision":"`))
	if bytes.Contains(body, []byte(`"succeeded":true`)) {
		return "committed", revision
	}
	return "not_committed", revision
}

type noop struct{}

func (noop) method() string                            { return "POST" }
func (noop) path(rng *rand.Rand) string                { return "/noop" }
func (noop) body(rng *rand.Rand, newest uint64) []byte { return []byte(`{"noop":true}`) }
func (noop) outcome(status int, body []byte) (string, uint64) {
	if status != 200 {
		return "error", 0
	}
	return "committed", 0
}

// Point reads (P12): a WeaselDB reader's GET /v1/kv/{key} against etcd's serializable
// range read of the same key (served by the member it reaches, like a reader: no quorum
// round). Both answer the key's value, so both are loaded with the same keys first.
type readerGet struct{ keys }

func (readerGet) method() string { return "GET" }

// The key goes into the path in the URL-safe alphabet; the keys are drawn by the body call,
// so path and body agree on the same random stream.
func (r readerGet) path(rng *rand.Rand) string {
	raw, _ := base64.StdEncoding.DecodeString(r.encoded[rng.Intn(len(r.encoded))])
	return "/v1/kv/" + base64.RawURLEncoding.EncodeToString(raw)
}
func (readerGet) body(rng *rand.Rand, newest uint64) []byte { return nil }
func (readerGet) outcome(status int, body []byte) (string, uint64) {
	switch status {
	case 200:
		return "found", 0
	case 404:
		return "missing", 0
	}
	return "error", 0
}

type etcdGet struct{ keys }

func (etcdGet) method() string             { return "POST" }
func (etcdGet) path(rng *rand.Rand) string { return "/v3/kv/range" }
func (e etcdGet) body(rng *rand.Rand, newest uint64) []byte {
	return []byte(`{"key":"` + e.encoded[rng.Intn(len(e.encoded))] + `","serializable":true}`)
}
func (etcdGet) outcome(status int, body []byte) (string, uint64) {
	if status != 200 {
		return "error", 0
	}
	if bytes.Contains(body, []byte(`"kvs":`)) {
		return "found", 0
	}
	return "missing", 0
}

func numberAfter(body, marker []byte) uint64 {
	i := bytes.Index(body, marker)
	if i < 0 {
		return 0
	}
	rest := body[i+len(marker):]
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, _ := strconv.ParseUint(string(rest[:end]), 10, 64)
	return n
}

// How every connection is opened and what every request carries: plain TCP, or TLS
// verified against -cacert; an Authorization header when -token-file is given.
var (
	tlsConfig   *tls.Config
	extraHeader string
)

func dial(addr string) (net.Conn, error) {
	if tlsConfig == nil {
		return net.Dial("tcp", addr)
	}
	return tls.Dial("tcp", addr, tlsConfig)
}

// secure sets tlsConfig and extraHeader from the -cacert and -token-file flags.
func secure(cacert, tokenFile string) error {
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate in it", cacert)
		}
		tlsConfig = &tls.Config{RootCAs: roots}
	}
	if tokenFile != "" {
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		extraHeader = "Authorization: Bearer " + string(bytes.TrimSpace(token)) + "\r\n"
	}
	return nil
}

// A keep-alive HTTP/1.1 connection: one request, one answer, with Content-Length.
type conn struct {
	addr   string
	netc   net.Conn
	reader *bufio.Reader
}

func (c *conn) do(method, path string, body []byte) (int, []byte, error) {
	if c.netc == nil {
		netc, err := dial(c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.netc, c.reader = netc, bufio.NewReaderSize(netc, 64*1024)
	}
	request := make([]byte, 0, len(body)+128)
	request = append(request, method...)
	request = append(request, ' ')
	request = append(request, path...)
	request = append(request, " HTTP/1.1\r\nHost: bench\r\n"...)
	request = append(request, extraHeader...)
	request = append(request, "Content-Type: application/json\r\nContent-Length: "...)
	request = strconv.AppendInt(request, int64(len(body)), 10)
	request = append(request, "\r\n\r\n"...)
	request = append(request, body...)
	if _, err := c.netc.Write(request); err != nil {
		c.close()
		return 0, nil, err
	}
	status, answer, err := c.readAnswer()
	if err != nil {
		c.close()
	}
	return status, answer, err
}

func (c *conn) readAnswer() (int, []byte, error) {
	line, err := c.reader.ReadSlice('\n')
	if err != nil || len(line) < 12 {
		return 0, nil, fmt.Errorf("status line: %v", err)
	}
	status, _ := strconv.Atoi(string(line[9:12]))
	length, closing := -1, false
	for {
		header, err := c.reader.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(header) <= 2 {
			break
		}
		name, value, found := bytes.Cut(bytes.TrimSpace(header), []byte(":"))
		if !found {
			continue
		}
		value = bytes.TrimSpace(value)
		switch string(bytes.ToLower(name)) {
		case "content-length":
			length, _ = strconv.Atoi(string(value))
		case "connection":
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length < 0 {
		return 0, nil, fmt.Errorf("no content-length")
	}
	answer := make([]byte, length)
	if _, err := io.ReadFull(c.reader, answer); err != nil {
		return 0, nil, err
	}
	if closing {
		c.close()
	}
	return status, answer, nil
}

func (c *conn) close() {
	if c.netc != nil {
		c.netc.Close()
		c.netc = nil
	}
}

type result struct {
	Workload    string             `json:"workload"`
	Connections int                `json:"connections"`
	Rate        float64            `json:"rate"`
	Seconds     float64            `json:"seconds"`
	Requests    int                `json:"requests"`
	PerSecond   float64            `json:"per_second"`
	Outcomes    map[string]int     `json:"outcomes"`
	Errors      int                `json:"errors"`
	LatencyMs   map[string]float64 `json:"latency_ms"`
}

type sample struct {
	latency time.Duration
	outcome string
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port of the server")
	kind := flag.String("workload", "weasel", "weasel | etcd | noop | reader-get | etcd-get | subscribe")
	connections := flag.Int("c", 16, "connections")
	duration := flag.Duration("d", 8*time.Second, "measured duration")
	warmup := flag.Duration("warmup", time.Second, "unmeasured warm-up")
	rate := flag.Float64("rate", 0, "requests per second (0: closed loop)")
	keyCount := flag.Int("keys", 100000, "distinct keys")
	printKeys := flag.Bool("print-keys", false, "print the -keys keys (base64), one per line, and exit")
	cacert := flag.String("cacert", "", "speak TLS, verifying the server against this CA file")
	tokenFile := flag.String("token-file", "", "send this file's token as Authorization: Bearer")
	flag.Parse()
	if err := secure(*cacert, *tokenFile); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if *printKeys {
		for _, key := range newKeys(*keyCount).encoded {
			fmt.Println(key)
		}
		return
	}
	if *kind == "subscribe" {
		subscribe(*addr, *connections, *warmup, *duration)
		return
	}

	var w workload
	switch *kind {
	case "weasel":
		w = weasel{newKeys(*keyCount)}
	case "etcd":
		w = etcd{newKeys(*keyCount)}
	case "noop":
		w = noop{}
	case "reader-get":
		w = readerGet{newKeys(*keyCount)}
	case "etcd-get":
		w = etcdGet{newKeys(*keyCount)}
	default:
		fmt.Fprintln(os.Stderr, "loadgen: unknown workload", *kind)
		os.Exit(2)
	}
	var newest atomic.Uint64
	start := time.Now()
	measureFrom := start.Add(*warmup)
	end := measureFrom.Add(*duration)

	// Open loop: a ticker hands out the time each request is due.
	var due chan time.Time
	if *rate > 0 {
		due = make(chan time.Time, 1<<20)
		go func() {
			interval := time.Duration(float64(time.Second) / *rate)
			next := time.Now()
			for next.Before(end) {
				time.Sleep(time.Until(next))
				due <- next
				next = next.Add(interval)
			}
			close(due)
		}()
	}

	samples := make([][]sample, *connections)
	var wg sync.WaitGroup
	for i := 0; i < *connections; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i) + 7))
			c := &conn{addr: *addr}
			defer c.close()
			mine := make([]sample, 0, 1<<16)
			for {
				var sent time.Time
				if due != nil {
					t, ok := <-due
					if !ok {
						break
					}
					sent = t
				} else {
					sent = time.Now()
					if !sent.Before(end) {
						break
					}
				}
				status, body, err := c.do(w.method(), w.path(rng), w.body(rng, newest.Load()))
				done := time.Now()
				outcome := "error"
				if err == nil {
					var version uint64
					outcome, version = w.outcome(status, body)
					for {
						seen := newest.Load()
						if version <= seen || newest.CompareAndSwap(seen, version) {
							break
						}
					}
				}
				if sent.After(measureFrom) && sent.Before(end) {
					mine = append(mine, sample{done.Sub(sent), outcome})
				}
			}
			samples[i] = mine
		}(i)
	}
	wg.Wait()

	all := make([]time.Duration, 0)
	r := result{Workload: *kind, Connections: *connections, Rate: *rate,
		Seconds: duration.Seconds(), Outcomes: map[string]int{}}
	for _, mine := range samples {
		for _, s := range mine {
			r.Outcomes[s.outcome]++
			if s.outcome == "error" {
				r.Errors++
				continue
			}
			all = append(all, s.latency)
		}
	}
	r.Requests = len(all)
	r.PerSecond = float64(r.Requests) / duration.Seconds()
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	r.LatencyMs = map[string]float64{}
	for name, q := range map[string]float64{"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999, "max": 1.0} {
		if len(all) == 0 {
			continue
		}
		index := int(q * float64(len(all)-1))
		r.LatencyMs[name] = float64(all[index].Microseconds()) / 1000
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// subscribe holds c change-stream subscriptions (GET /v1/subscribe) open for the duration
// and counts the transaction events they receive, checking that each event's prev_version
// is the version of the one before (no gap, no duplicate).
func subscribe(addr string, connections int, warmup, duration time.Duration) {
	type tally struct{ events, gaps int }
	tallies := make([]tally, connections)
	var started sync.WaitGroup
	var wg sync.WaitGroup
	stop := time.Now().Add(warmup + duration)
	measureFrom := time.Now().Add(warmup)
	for i := 0; i < connections; i++ {
		wg.Add(1)
		started.Add(1)
		go func(i int) {
			defer wg.Done()
			netc, err := dial(addr)
			if err != nil {
				started.Done()
				return
			}
			defer netc.Close()
			netc.SetDeadline(stop)
			fmt.Fprintf(netc, "GET /v1/subscribe HTTP/1.1\r\nHost: bench\r\n%s\r\n", extraHeader)
			reader := bufio.NewReaderSize(netc, 256*1024)
			started.Done()
			var last uint64
			for {
				line, err := reader.ReadSlice('\n')
				if err != nil {
					return
				}
				if !bytes.HasPrefix(line, []byte("data: {\"request_id\"")) {
					continue
				}
				version := numberAfter(line, []byte(`"version":`))
				prev := numberAfter(line, []byte(`"prev_version":`))
				if last != 0 && prev != last {
					tallies[i].gaps++
				}
				last = version
				if time.Now().After(measureFrom) {
					tallies[i].events++
				}
			}
		}(i)
	}
	started.Wait()
	wg.Wait()
	total, gaps := 0, 0
	for _, t := range tallies {
		total += t.events
		gaps += t.gaps
	}
	out, _ := json.Marshal(map[string]any{
		"workload": "subscribe", "subscribers": connections, "seconds": duration.Seconds(),
		"events": total, "events_per_second": float64(total) / duration.Seconds(), "gaps": gaps,
	})
	fmt.Println(string(out))
}
