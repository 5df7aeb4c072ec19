package weir

// Real three-node clusters of the weir binary ($WEIR_BIN, default ../../target/debug/weir)
// for the tests, and a TCP proxy that can cut a client off. Ports go into each node's
// config before it starts, so they are taken below the kernel's ephemeral range (where an
// outgoing connection could take one first) and never handed out twice. Every wait is
// bounded; every process is killed at the end.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const readyWait = 60 * time.Second

func weirBin(t testing.TB) string {
	p := os.Getenv("WEIR_BIN")
	if p == "" {
		p = filepath.Join("..", "..", "target", "debug", "weir")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no weir binary at %s: build it (cargo build) or set WEIR_BIN", abs)
	}
	return abs
}

var (
	portMu   sync.Mutex
	portNext = -1
)

func freePort(t testing.TB) int {
	portMu.Lock()
	defer portMu.Unlock()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	const min = 20000
	if lo-min < 1024 {
		lo = 32768
	}
	span := lo - min
	if portNext < 0 {
		portNext = (os.Getpid() * 997) % span
	}
	for i := 0; i < span; i++ {
		port := min + portNext%span
		portNext++
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port on 127.0.0.1")
	return 0
}

type testNode struct {
	id                     int
	client, peer, httpPort int
	config, log            string
	cmd                    *exec.Cmd
}

type testCluster struct {
	dir    string
	tls    bool
	tokens map[string]string // secret -> role
	nodes  []*testNode
}

// startCluster starts three nodes and waits for a leader; they are killed at cleanup.
func startCluster(t testing.TB, tls bool, tokens map[string]string) *testCluster {
	return startClusterWith(t, tls, tokens, "")
}

// startClusterWith is startCluster with the top-level TOML lines extra in every config.
func startClusterWith(t testing.TB, tls bool, tokens map[string]string, extra string) *testCluster {
	bin := weirBin(t)
	c := &testCluster{dir: t.TempDir(), tls: tls, tokens: tokens}
	if tls {
		out, err := exec.Command(bin, "certs", "init", filepath.Join(c.dir, "certs")).CombinedOutput()
		if err != nil {
			t.Fatalf("weir certs init: %v: %s", err, out)
		}
	}
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, &testNode{
			id: i, client: freePort(t), peer: freePort(t), httpPort: freePort(t),
			config: filepath.Join(c.dir, fmt.Sprintf("node%d.toml", i)),
			log:    filepath.Join(c.dir, fmt.Sprintf("node%d.log", i)),
		})
	}
	for _, n := range c.nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "id = %d\ndata_dir = %q\nclient_addr = \"127.0.0.1:%d\"\npeer_addr = \"127.0.0.1:%d\"\nhttp_listen = \"127.0.0.1:%d\"\n\n",
			n.id, filepath.Join(c.dir, fmt.Sprintf("data%d", n.id)), n.client, n.peer, n.httpPort)
		fmt.Fprintf(&b, "%s\n\n", extra)
		if tls {
			certs := filepath.Join(c.dir, "certs")
			fmt.Fprintf(&b, "[tls]\ncert = %q\nkey = %q\nca = %q\n\n",
				filepath.Join(certs, fmt.Sprintf("node%d.pem", n.id)),
				filepath.Join(certs, fmt.Sprintf("node%d.key", n.id)),
				filepath.Join(certs, "ca.pem"))
		}
		for secret, role := range tokens {
			sum := sha256.Sum256([]byte(secret))
			fmt.Fprintf(&b, "[[tokens]]\nsha256 = %q\nrole = %q\n\n", hex.EncodeToString(sum[:]), role)
		}
		for _, p := range c.nodes {
			fmt.Fprintf(&b, "[[peers]]\nid = %d\npeer = \"127.0.0.1:%d\"\nclient = \"127.0.0.1:%d\"\n\n", p.id, p.peer, p.client)
		}
		if err := os.WriteFile(n.config, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.close)
	for _, n := range c.nodes {
		logf, err := os.Create(n.log)
		if err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command(bin, "serve", "--config", n.config)
		n.cmd.Dir = c.dir
		n.cmd.Stderr = logf
		n.cmd.Env = append(os.Environ(), "RUST_LOG=info,openraft=warn")
		n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
	}
	c.waitReady(t)
	return c
}

func (c *testCluster) close() {
	for _, n := range c.nodes {
		if n.cmd != nil && n.cmd.Process != nil {
			_ = n.cmd.Process.Kill()
			_, _ = n.cmd.Process.Wait()
		}
	}
}

func (c *testCluster) servers() []string {
	var s []string
	for _, n := range c.nodes {
		s = append(s, fmt.Sprintf("127.0.0.1:%d", n.httpPort))
	}
	return s
}

func (c *testCluster) ca(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(c.dir, "certs", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *testCluster) adminToken() string {
	for secret, role := range c.tokens {
		if role == "admin" {
			return secret
		}
	}
	return ""
}

// config answers a client configuration for the cluster (admin token, CA when TLS).
func (c *testCluster) config(t testing.TB, tenant string) Config {
	cfg := Config{Servers: c.servers(), Tenant: tenant, Token: c.adminToken()}
	if c.tls {
		cfg.CA = c.ca(t)
	}
	return cfg
}

// waitReady waits until every node is ready (/readyz) and one reports a leader.
func (c *testCluster) waitReady(t testing.TB) {
	cfg := c.config(t, "default")
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(readyWait)
	last := "no answer"
	for time.Now().Before(deadline) {
		ready := true
		for i := range c.nodes {
			ex := cl.t.once(context.Background(), i, "GET", "/readyz", nil)
			if ex.err != nil || ex.status != 200 {
				ready = false
				last = fmt.Sprintf("node %d: %v %d %s", i+1, ex.err, ex.status, ex.body)
				break
			}
		}
		if ready {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("cluster not ready within %v: %s\n%s", readyWait, last, c.logTails())
}

func (c *testCluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		data, _ := os.ReadFile(n.log)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- node %d ---\n%s\n", n.id, strings.Join(lines, "\n"))
	}
	return b.String()
}

// proxy relays TCP from a port of its own to one node's; cut stops relaying both ways
// without closing anything (as a partition does); connections accepted during the cut
// are held unconnected.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cutCh  chan struct{} // closed while relaying
	conns  map[net.Conn]bool
	closed bool
}

func newProxy(t testing.TB, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, cutCh: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.cutCh)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) open() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutCh
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) accept() {
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(down) {
			return
		}
		go func() {
			<-p.open()
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				down.Close()
				return
			}
			if !p.track(up) {
				down.Close()
				return
			}
			go p.pump(down, up)
			go p.pump(up, down)
		}()
	}
}

func (p *proxy) pump(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			<-p.open()
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if err != io.EOF {
				break
			}
			break
		}
		<-p.open()
	}
	from.Close()
	to.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.cutCh:
		p.cutCh = make(chan struct{})
	default:
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	select {
	case <-p.cutCh:
	default:
		close(p.cutCh)
	}
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.l.Close()
	for c := range conns {
		c.Close()
	}
}

// proxies answers one cuttable proxy per node of the cluster.
func (c *testCluster) proxies(t testing.TB) []*proxy {
	var out []*proxy
	for _, s := range c.servers() {
		out = append(out, newProxy(t, s))
	}
	return out
}

// proxiedConfig answers a client configuration for tenant that reaches every node only
// through a cuttable proxy of its own, and the proxies.
func (c *testCluster) proxiedConfig(t testing.TB, tenant string) (Config, []*proxy) {
	ps := c.proxies(t)
	cfg := c.config(t, tenant)
	cfg.Servers = nil
	for _, p := range ps {
		cfg.Servers = append(cfg.Servers, p.addr())
	}
	return cfg, ps
}

var _ = http.StatusOK
