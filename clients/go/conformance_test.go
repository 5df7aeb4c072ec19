package weir

// The conformance driver: runs every scenario of tests/conformance/scenarios.json with
// this client against real clusters, printing `conformance go <name>: pass|fail|skip
// (<reason>)` for each (tests/conformance/README.md describes the steps).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type scenarioFile struct {
	Version int `json:"version"`
	Tokens  map[string]struct {
		Secret string  `json:"secret"`
		Role   *string `json:"role"`
	} `json:"tokens"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name    string `json:"name"`
	About   string `json:"about"`
	Cluster string `json:"cluster"`
	Proxied bool   `json:"proxied"`
	Limits  []struct {
		Name       string  `json:"name"`
		Concurrent uint32  `json:"concurrent"`
		PerSecond  float64 `json:"per_second"`
		Burst      uint32  `json:"burst"`
		Keyed      bool    `json:"keyed"`
	} `json:"limits"`
	Steps []step `json:"steps"`
}

type step struct {
	Do         string  `json:"do"`
	As         string  `json:"as"`
	Client     string  `json:"client"`
	Session    string  `json:"session"`
	Permit     string  `json:"permit"`
	Limit      string  `json:"limit"`
	Key        string  `json:"key"`
	Units      uint32  `json:"units"`
	Parts      []Part  `json:"parts"`
	Priority   int32   `json:"priority"`
	Wait       *bool   `json:"wait"`
	TimeoutMs  int64   `json:"timeout_ms"`
	Estimate   bool    `json:"estimate"`
	Ticket     uint64  `json:"ticket"`
	Background bool    `json:"background"`
	WithinMs   int64   `json:"within_ms"`
	TTLMs      int64   `json:"ttl_ms"`
	Ms         int64   `json:"ms"`
	Cost       uint64  `json:"cost"`
	Reason     string  `json:"reason"`
	Token      string  `json:"token"`
	CA         *bool   `json:"ca"`
	Expect     *expect `json:"expect"`
}

type expect struct {
	Outcome     string  `json:"outcome"`
	Error       string  `json:"error"`
	FenceGt     string  `json:"fence_gt"`
	SameFenceAs string  `json:"same_fence_as"`
	Status      string  `json:"status"`
	InUse       *uint64 `json:"in_use"`
	Waiting     *uint64 `json:"waiting"`
	Tokens      *uint64 `json:"tokens"`
}

// refusalKinds maps the file's refusal names to this client's errors.
var refusalKinds = map[string]error{
	"Busy": ErrBusy, "TooLarge": ErrTooLarge, "UnknownLimit": ErrUnknownLimit,
	"Halted": ErrHalted, "TimedOut": ErrTimedOut, "Forbidden": ErrForbidden,
	"Unauthorized": ErrUnauthenticated, "TlsUntrusted": ErrUntrusted,
}

func loadScenarios(t testing.TB) scenarioFile {
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "conformance", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f scenarioFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("scenarios.json: %v", err)
	}
	if f.Version != 1 {
		t.Fatalf("scenarios.json version %d, this driver reads 1", f.Version)
	}
	return f
}

func TestConformance(t *testing.T) {
	f := loadScenarios(t)
	need := map[string]bool{}
	for _, s := range f.Scenarios {
		need[s.Cluster] = true
	}
	clusters := map[string]*testCluster{}
	if need["plain"] {
		clusters["plain"] = startCluster(t, false, nil)
	}
	if need["secure"] {
		tokens := map[string]string{}
		for _, tok := range f.Tokens {
			if tok.Role != nil {
				tokens[tok.Secret] = *tok.Role
			}
		}
		clusters["secure"] = startCluster(t, true, tokens)
	}
	failed := 0
	for _, s := range f.Scenarios {
		c, ok := clusters[s.Cluster]
		if !ok {
			fmt.Printf("conformance go %s: skip (no %q cluster)\n", s.Name, s.Cluster)
			continue
		}
		err := runScenario(t, f, c, s)
		if err != nil {
			failed++
			fmt.Printf("conformance go %s: fail (%v)\n", s.Name, err)
			t.Errorf("scenario %s: %v", s.Name, err)
		} else {
			fmt.Printf("conformance go %s: pass\n", s.Name)
		}
	}
	if failed > 0 {
		t.Logf("%d scenarios failed", failed)
	}
}

type run struct {
	t        testing.TB
	f        scenarioFile
	c        *testCluster
	s        scenario
	admin    *Client
	clients  map[string]*Client
	proxies  map[string][]*proxy
	sessions map[string]*Session
	owner    map[string]string // session -> client name
	permits  map[string]*Permit
	pending  map[string]chan acquired
}

type acquired struct {
	p   *Permit
	err error
}

func runScenario(t testing.TB, f scenarioFile, c *testCluster, s scenario) (err error) {
	r := &run{t: t, f: f, c: c, s: s, clients: map[string]*Client{}, proxies: map[string][]*proxy{},
		sessions: map[string]*Session{}, owner: map[string]string{}, permits: map[string]*Permit{},
		pending: map[string]chan acquired{}}
	adminCfg := c.config(t, s.Name)
	if tok, ok := f.Tokens["admin"]; ok && c.tls {
		adminCfg.Token = tok.Secret
	}
	if r.admin, err = New(adminCfg); err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, sess := range r.sessions {
			_ = sess.Close(ctx)
		}
		for _, cl := range r.clients {
			cl.Close()
		}
		r.admin.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range s.Limits {
		spec := LimitSpec{Concurrent: l.Concurrent, PerSecond: l.PerSecond, Burst: l.Burst, Keyed: l.Keyed}
		if err := r.admin.DefineLimit(ctx, l.Name, spec); err != nil {
			return fmt.Errorf("defining %s: %w", l.Name, err)
		}
	}
	defaultCfg := adminCfg
	if s.Proxied {
		var addrs []string
		for _, p := range c.proxies(t) {
			r.proxies["default"] = append(r.proxies["default"], p)
			addrs = append(addrs, p.addr())
		}
		defaultCfg.Servers = addrs
	}
	if r.clients["default"], err = New(defaultCfg); err != nil {
		return err
	}
	for i, st := range s.Steps {
		if err := r.step(st); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, st.Do, err)
		}
	}
	return nil
}

func (r *run) client(name string) (*Client, error) {
	if name == "" {
		name = "default"
	}
	c, ok := r.clients[name]
	if !ok {
		return nil, fmt.Errorf("no client %q", name)
	}
	return c, nil
}

// outcome checks an operation's error against the step's expectation (none: success).
func outcome(e *expect, err error, success string) error {
	want := success
	if e != nil && e.Outcome != "" {
		want = e.Outcome
	}
	if want != "refused" {
		if err != nil {
			return fmt.Errorf("want %s, got %v", want, err)
		}
		return nil
	}
	if err == nil {
		return fmt.Errorf("want refused %s, got %s", e.Error, success)
	}
	kind, ok := refusalKinds[e.Error]
	if !ok {
		return fmt.Errorf("unknown refusal kind %q in the file", e.Error)
	}
	if !errors.Is(err, kind) {
		return fmt.Errorf("want refused %s, got %v", e.Error, err)
	}
	return nil
}

func (r *run) fence(name string) (uint64, error) {
	p, ok := r.permits[name]
	if !ok {
		return 0, fmt.Errorf("no permit %q", name)
	}
	return p.Fence(), nil
}

func (r *run) checkGrant(e *expect, p *Permit) error {
	if e == nil {
		return nil
	}
	if e.FenceGt != "" {
		f, err := r.fence(e.FenceGt)
		if err != nil {
			return err
		}
		if p.Fence() <= f {
			return fmt.Errorf("fence %d not greater than %s's %d", p.Fence(), e.FenceGt, f)
		}
	}
	if e.SameFenceAs != "" {
		f, err := r.fence(e.SameFenceAs)
		if err != nil {
			return err
		}
		if p.Fence() != f {
			return fmt.Errorf("fence %d, not %s's %d", p.Fence(), e.SameFenceAs, f)
		}
	}
	return nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func (r *run) step(st step) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch st.Do {
	case "connect":
		cfg := Config{Servers: r.c.servers(), Tenant: r.s.Name}
		if st.Token != "" {
			tok, ok := r.f.Tokens[st.Token]
			if !ok {
				return fmt.Errorf("no token %q", st.Token)
			}
			cfg.Token = tok.Secret
		}
		if st.CA != nil && *st.CA {
			cfg.CA = r.c.ca(r.t)
		} else {
			cfg.TLS = true
		}
		cl, err := New(cfg)
		if err != nil {
			return err
		}
		r.clients[st.As] = cl
		return nil
	case "open_session":
		cl, err := r.client(st.Client)
		if err != nil {
			return err
		}
		s, err := cl.OpenSession(ctx, SessionOptions{TTL: ms(st.TTLMs)})
		if err := outcome(st.Expect, err, "opened"); err != nil {
			return err
		}
		if s != nil && st.As != "" {
			r.sessions[st.As] = s
			r.owner[st.As] = st.Client
		}
		return nil
	case "acquire":
		s, ok := r.sessions[st.Session]
		if !ok {
			return fmt.Errorf("no session %q", st.Session)
		}
		opts := []AcquireOption{Priority(st.Priority)}
		if st.Key != "" {
			opts = append(opts, Key(st.Key))
		}
		if st.Units > 0 {
			opts = append(opts, Units(st.Units))
		}
		if len(st.Parts) > 0 {
			opts = append(opts, Parts(st.Parts...))
		}
		if st.Wait != nil && !*st.Wait {
			opts = append(opts, NoWait())
		}
		if st.Estimate {
			opts = append(opts, Estimate())
		}
		if st.Ticket > 0 {
			opts = append(opts, Ticket(st.Ticket))
		}
		timeout := 10 * time.Second
		if st.TimeoutMs > 0 {
			timeout = ms(st.TimeoutMs)
		}
		if st.Background {
			done := make(chan acquired, 1)
			r.pending[st.As] = done
			go func() {
				actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer acancel()
				p, err := s.Acquire(actx, st.Limit, opts...)
				done <- acquired{p, err}
			}()
			return nil
		}
		actx, acancel := context.WithTimeout(ctx, timeout)
		defer acancel()
		p, err := s.Acquire(actx, st.Limit, opts...)
		if err := outcome(st.Expect, err, "granted"); err != nil {
			return err
		}
		if p == nil {
			return nil
		}
		if st.As != "" {
			r.permits[st.As] = p
		}
		return r.checkGrant(st.Expect, p)
	case "await":
		done, ok := r.pending[st.Permit]
		if !ok {
			return fmt.Errorf("no background acquire %q", st.Permit)
		}
		select {
		case a := <-done:
			if err := outcome(st.Expect, a.err, "granted"); err != nil {
				return err
			}
			if a.p == nil {
				return nil
			}
			r.permits[st.Permit] = a.p
			return r.checkGrant(st.Expect, a.p)
		case <-time.After(ms(st.WithinMs)):
			return fmt.Errorf("%s: no outcome within %d ms", st.Permit, st.WithinMs)
		}
	case "release":
		p, ok := r.permits[st.Permit]
		if !ok {
			return fmt.Errorf("no permit %q", st.Permit)
		}
		return p.Release(ctx)
	case "settle":
		p, ok := r.permits[st.Permit]
		if !ok {
			return fmt.Errorf("no permit %q", st.Permit)
		}
		got, err := p.Settle(ctx, st.Cost)
		if err != nil {
			return err
		}
		if st.Expect != nil && st.Expect.Status != "" && got.Status != st.Expect.Status {
			return fmt.Errorf("settled %q, want %q", got.Status, st.Expect.Status)
		}
		return nil
	case "take":
		cl, err := r.client(st.Client)
		if err != nil {
			return err
		}
		_, err = cl.Take(ctx, st.Limit, TakeOptions{Key: st.Key, Units: st.Units, Parts: st.Parts})
		return outcome(st.Expect, err, "taken")
	case "set_halt", "clear_halt":
		cl := r.admin
		if st.Client != "" {
			var err error
			if cl, err = r.client(st.Client); err != nil {
				return err
			}
		}
		var err error
		if st.Do == "set_halt" {
			err = cl.SetHalt(ctx, st.Reason)
		} else {
			err = cl.ClearHalt(ctx)
		}
		return outcome(st.Expect, err, "ok")
	case "freeze_keepalives":
		name := r.owner[st.Session]
		if name == "" {
			name = "default"
		}
		ps := r.proxies[name]
		if len(ps) == 0 {
			return fmt.Errorf("session %q's client is not behind proxies (the scenario is not proxied)", st.Session)
		}
		for _, p := range ps {
			p.cut()
		}
		return nil
	case "expect_held":
		p, ok := r.permits[st.Permit]
		if !ok {
			return fmt.Errorf("no permit %q", st.Permit)
		}
		if err := p.Err(); err != nil {
			return fmt.Errorf("%s believed lost: %v", st.Permit, err)
		}
		return nil
	case "expect_lost":
		p, ok := r.permits[st.Permit]
		if !ok {
			return fmt.Errorf("no permit %q", st.Permit)
		}
		start := time.Now()
		select {
		case <-p.Lost():
		case <-time.After(ms(st.WithinMs)):
			return fmt.Errorf("%s still believed held %d ms after the step began", st.Permit, st.WithinMs)
		}
		var lost *LostError
		if !errors.As(p.Err(), &lost) {
			return fmt.Errorf("%s: Lost closed but Err is %v", st.Permit, p.Err())
		}
		if st.Reason != "" && lost.Kind.String() != st.Reason {
			return fmt.Errorf("%s lost (%s) after %v, want %s", st.Permit, lost.Kind, time.Since(start), st.Reason)
		}
		return nil
	case "expect_limit":
		deadline := time.Now().Add(ms(st.WithinMs))
		for {
			var got LimitStatus
			var err error
			if st.Key != "" {
				got, err = r.admin.LimitKey(ctx, st.Limit, st.Key)
			} else {
				got, err = r.admin.Limit(ctx, st.Limit)
			}
			if err != nil {
				return err
			}
			e := st.Expect
			var miss string
			switch {
			case e.InUse != nil && got.InUse != *e.InUse:
				miss = fmt.Sprintf("in_use %d, want %d", got.InUse, *e.InUse)
			case e.Waiting != nil && got.Waiting != *e.Waiting:
				miss = fmt.Sprintf("waiting %d, want %d", got.Waiting, *e.Waiting)
			case e.Tokens != nil && got.Tokens != *e.Tokens:
				miss = fmt.Sprintf("tokens %d, want %d", got.Tokens, *e.Tokens)
			}
			if miss == "" {
				return nil
			}
			if !time.Now().Before(deadline) {
				return fmt.Errorf("%s: %s", st.Limit, miss)
			}
			time.Sleep(50 * time.Millisecond)
		}
	case "sleep":
		time.Sleep(ms(st.Ms))
		return nil
	case "close":
		s, ok := r.sessions[st.Session]
		if !ok {
			return fmt.Errorf("no session %q", st.Session)
		}
		delete(r.sessions, st.Session)
		return s.Close(ctx)
	}
	return fmt.Errorf("unknown step %q", st.Do)
}
