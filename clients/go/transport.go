package weir

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// HTTP to the cluster: which node to ask, when a node is silent, what to retry.
//
// Every node serves the whole API (a follower forwards to the leader), so the transport
// keeps one current node and sends everything there, moving to the next server when the
// current one refuses the connection, answers 503, or falls silent.
//
// A silent node versus a busy one: a stopped process (SIGSTOP, a frozen VM) keeps its
// sockets open and nothing fails, so a short timeout cannot tell it from a busy node. While
// a request or an event stream is open on a node, the transport asks that node's /healthz
// every probeEvery; the HTTP server answers it without the cluster, so a busy node answers
// and a stopped one does not. A request whose node was heard from neither by its answer
// nor by a probe for silenceMax (1 s) is given up, the node is passed over for suspectFor,
// and the request goes to the next node at once (every write is idempotent).
//
// A request is tried at most attemptsMax times within requestDeadline (below the 15 s for
// which the cluster remembers a finished ticket). A write that may have been applied and
// then ran out of tries is ErrOutcomeUnknown, never a plain failure.

const (
	silenceMax      = time.Second
	silenceCheck    = 50 * time.Millisecond
	probeEvery      = 200 * time.Millisecond
	probeTimeout    = time.Second
	suspectFor      = 3 * time.Second
	retryPause      = 100 * time.Millisecond
	requestDeadline = 10 * time.Second
	attemptsMax     = 12
	bodyMax         = 4 << 20
)

type node struct {
	base         string
	lastHeard    atomic.Int64 // unix ns of the last answer or probe answered
	suspectUntil atomic.Int64 // unix ns
}

func (n *node) heard() { n.lastHeard.Store(time.Now().UnixNano()) }

type transport struct {
	nodes   []*node
	current atomic.Int32
	http    *http.Client
	token   string
	group   string // the Weir-Group header's value; "" for none
}

func newTransport(cfg Config) (*transport, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("weir: no servers")
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 3 * time.Second,
	}
	scheme := "http"
	if cfg.CA != nil || cfg.TLS {
		scheme = "https"
		tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CA != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(cfg.CA) {
				return nil, fmt.Errorf("weir: the CA holds no PEM certificate")
			}
			tlsCfg.RootCAs = pool
		}
		tr.TLSClientConfig = tlsCfg
	}
	t := &transport{http: &http.Client{Transport: tr}, token: cfg.Token}
	if cfg.Group != nil {
		t.group = strconv.FormatUint(*cfg.Group, 10)
	}
	for _, s := range cfg.Servers {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = scheme + "://" + s
		}
		t.nodes = append(t.nodes, &node{base: s})
	}
	if len(t.nodes) == 0 {
		return nil, fmt.Errorf("weir: no servers")
	}
	t.current.Store(int32(rand.Intn(len(t.nodes))))
	return t, nil
}

func (t *transport) close() { t.http.CloseIdleConnections() }

// pick answers the current node, or the next one not suspected.
func (t *transport) pick() int {
	now := time.Now().UnixNano()
	cur := int(t.current.Load())
	for i := 0; i < len(t.nodes); i++ {
		j := (cur + i) % len(t.nodes)
		if t.nodes[j].suspectUntil.Load() <= now {
			if j != cur {
				t.current.Store(int32(j))
			}
			return j
		}
	}
	return cur
}

// moveOn passes from node i to the next (if i is still the current one).
func (t *transport) moveOn(i int) {
	t.current.CompareAndSwap(int32(i), int32((i+1)%len(t.nodes)))
}

func (t *transport) suspect(i int) {
	t.nodes[i].suspectUntil.Store(time.Now().Add(suspectFor).UnixNano())
	t.moveOn(i)
}

// outcome of one exchange with one node.
type exchange struct {
	status  int
	body    []byte
	err     error
	silent  bool // given up on silence
	sent    bool // the request may have reached the node
	refused bool // the connection was refused: nothing sent
}

func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// watch cancels cancel once node n has been silent for silenceMax since start, probing it
// meanwhile; it returns a stop function and whether the cancel was for silence.
func (t *transport) watch(n *node, cancel context.CancelFunc) (stop func(), silent *atomic.Bool) {
	done := make(chan struct{})
	silent = &atomic.Bool{}
	start := time.Now().UnixNano()
	go func() {
		check := time.NewTicker(silenceCheck)
		defer check.Stop()
		nextProbe := time.Now().Add(probeEvery)
		probing := atomic.Bool{}
		for {
			select {
			case <-done:
				return
			case now := <-check.C:
				last := n.lastHeard.Load()
				if last < start {
					last = start
				}
				if now.UnixNano()-last > int64(silenceMax) {
					silent.Store(true)
					cancel()
					return
				}
				if now.After(nextProbe) && probing.CompareAndSwap(false, true) {
					nextProbe = now.Add(probeEvery)
					go func() {
						defer probing.Store(false)
						t.probe(n)
					}()
				}
			}
		}
	}()
	return func() { close(done) }, silent
}

func (t *transport) probe(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", n.base+"/healthz", nil)
	if err != nil {
		return
	}
	resp, err := t.http.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode == 200 {
		n.heard()
	}
}

func (t *transport) newRequest(ctx context.Context, n *node, method, path string, payload []byte) (*http.Request, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.base+path, body)
	if err != nil {
		return nil, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	if t.group != "" {
		// Every request, a session's above all, speaks to the client's group.
		req.Header.Set("Weir-Group", t.group)
	}
	return req, nil
}

// once sends one request to node i and reads its answer, giving up on silence.
func (t *transport) once(ctx context.Context, i int, method, path string, payload []byte) exchange {
	n := t.nodes[i]
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := t.newRequest(rctx, n, method, path, payload)
	if err != nil {
		return exchange{err: err}
	}
	stop, silent := t.watch(n, cancel)
	defer stop()
	resp, err := t.http.Do(req)
	if err != nil {
		return exchange{err: err, silent: silent.Load(), sent: !isRefused(err), refused: isRefused(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, bodyMax))
	if err != nil {
		return exchange{err: err, silent: silent.Load(), sent: true}
	}
	n.heard()
	return exchange{status: resp.StatusCode, body: b, sent: true}
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// untrusted answers an ErrUntrusted error when err is a certificate verification failure.
func untrusted(err error) *Error {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		strings.Contains(err.Error(), "certificate signed by unknown authority") {
		return failure(ErrUntrusted, "Untrusted", "%v", err)
	}
	return nil
}

// call sends a request until a node answers it (the package comment's rules) and decodes
// a 2xx answer into out (when not nil); any other answer is an *Error.
func (t *transport) call(ctx context.Context, method, path string, body any, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("weir: encoding the request: %w", err)
		}
	}
	write := method != "GET"
	deadline := time.Now().Add(requestDeadline)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	mayApplied := false
	sawNoLeader := false
	var last error
	for attempt := 0; attempt < attemptsMax; attempt++ {
		if attempt > 0 && attempt%len(t.nodes) == 0 {
			if sleepCtx(cctx, jittered(retryPause)) != nil {
				break
			}
		}
		i := t.pick()
		ex := t.once(cctx, i, method, path, payload)
		if ex.err != nil {
			if e := untrusted(ex.err); e != nil {
				return e
			}
			if ctx.Err() != nil {
				break
			}
			last = ex.err
			if ex.sent && write {
				mayApplied = true
			}
			if ex.silent {
				t.suspect(i)
			} else {
				t.moveOn(i)
			}
			continue
		}
		if ex.status == http.StatusServiceUnavailable {
			sawNoLeader = true
			last = decodeError(ex)
			// The node may have forwarded the write before the leader went.
			if write {
				mayApplied = true
			}
			t.moveOn(i)
			if sleepCtx(cctx, jittered(retryPause)) != nil {
				break
			}
			continue
		}
		if ex.status >= 200 && ex.status < 300 {
			if out != nil && len(ex.body) > 0 {
				if err := json.Unmarshal(ex.body, out); err != nil {
					return failure(ErrProtocol, "Protocol", "%s %s: undecodable answer: %v", method, path, err)
				}
			}
			return nil
		}
		return decodeError(ex)
	}
	if ctx.Err() != nil && !mayApplied {
		return ctx.Err()
	}
	if mayApplied {
		return failure(ErrOutcomeUnknown, "OutcomeUnknown", "%s %s: no answer (last: %v); it may have been applied", method, path, last)
	}
	if sawNoLeader {
		return failure(ErrNoLeader, "NoLeader", "%s %s: no node could serve (last: %v)", method, path, last)
	}
	return failure(ErrUnavailable, "Unavailable", "%s %s: no node reached (last: %v)", method, path, last)
}

func decodeError(ex exchange) *Error {
	fields := map[string]any{}
	if err := json.Unmarshal(ex.body, &fields); err != nil {
		return newError(http.StatusText(ex.status), strings.TrimSpace(string(ex.body)), ex.status, nil)
	}
	name, _ := fields["error"].(string)
	message, _ := fields["message"].(string)
	if name == "" {
		name = http.StatusText(ex.status)
	}
	return newError(name, message, ex.status, fields)
}

// hedge sends an idempotent request to every node but the current one at once; the first
// to answer (an answer, not a transport failure) wins and becomes the current node.
func (t *transport) hedge(ctx context.Context, method, path string, payload []byte, out any) error {
	cur := int(t.current.Load())
	type answer struct {
		i  int
		ex exchange
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(t.nodes))
	sent := 0
	for i := range t.nodes {
		if i == cur {
			continue
		}
		sent++
		go func(i int) { answers <- answer{i, t.once(hctx, i, method, path, payload)} }(i)
	}
	var last error = failure(ErrUnavailable, "Unavailable", "no other node answered")
	for k := 0; k < sent; k++ {
		a := <-answers
		if a.ex.err != nil || a.ex.status == http.StatusServiceUnavailable {
			if a.ex.err != nil {
				last = a.ex.err
			}
			continue
		}
		t.current.Store(int32(a.i))
		if a.ex.status >= 200 && a.ex.status < 300 {
			if out != nil {
				if err := json.Unmarshal(a.ex.body, out); err != nil {
					return failure(ErrProtocol, "Protocol", "%s %s: undecodable answer: %v", method, path, err)
				}
			}
			return nil
		}
		return decodeError(a.ex)
	}
	return last
}

// stream follows a server-sent event stream on the current node until it ends, fails or
// falls silent, calling opened once connected and event for each event.
func (t *transport) stream(ctx context.Context, path string, opened func(), event func(name, data string)) error {
	i := t.pick()
	n := t.nodes[i]
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := t.newRequest(sctx, n, "GET", path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	stop, silent := t.watch(n, cancel)
	defer stop()
	resp, err := t.http.Do(req)
	if err != nil {
		if silent.Load() {
			t.suspect(i)
		} else {
			t.moveOn(i)
		}
		if e := untrusted(err); e != nil {
			return e
		}
		return err
	}
	defer resp.Body.Close()
	n.heard()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, bodyMax))
		if resp.StatusCode == http.StatusServiceUnavailable {
			t.moveOn(i)
		}
		return decodeError(exchange{status: resp.StatusCode, body: b})
	}
	opened()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var name string
	var data []string
	for sc.Scan() {
		n.heard()
		line := sc.Text()
		switch {
		case line == "":
			if name != "" || len(data) > 0 {
				if name == "" {
					name = "message"
				}
				event(name, strings.Join(data, "\n"))
			}
			name, data = "", nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if silent.Load() {
		t.suspect(i)
		return fmt.Errorf("weir: %s: node %s fell silent", path, n.base)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}
