package weir

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Config says how to reach the cluster.
type Config struct {
	// Servers are the nodes' HTTP addresses (each node's http_listen), host:port or URLs.
	// Any node is an entry point: a follower forwards to the leader.
	Servers []string
	// CA is the PEM of the cluster's CA: with it the client speaks HTTPS and trusts only
	// certificates that CA signed.
	CA []byte
	// TLS speaks HTTPS with the system's roots (when CA is nil).
	TLS bool
	// Token is sent as Authorization: Bearer.
	Token string
	// Tenant is the tenant of every call ("default" when empty).
	Tenant string
	// Group, on a cluster of several Raft groups, is the data group the client speaks to
	// (sent as the Weir-Group header on every request; nil: the nodes' default group). A
	// session is its group's: the client holds the permits of the tenants placed in its
	// group, and a session's request for a tenant of another group fails ErrWrongGroup,
	// whose Error names that group ("group").
	Group *uint64
}

// ConfigFromEnv reads WEIR_HTTP_SERVERS (else WEIR_SERVERS; comma separated; default
// 127.0.0.1:7611), WEIR_CA (a PEM file), WEIR_TOKEN, WEIR_TENANT and WEIR_GROUP.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Token: os.Getenv("WEIR_TOKEN"), Tenant: os.Getenv("WEIR_TENANT")}
	if g := strings.TrimSpace(os.Getenv("WEIR_GROUP")); g != "" {
		group, err := strconv.ParseUint(g, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("weir: WEIR_GROUP must be a group number: got %q", g)
		}
		cfg.Group = &group
	}
	servers := os.Getenv("WEIR_HTTP_SERVERS")
	if servers == "" {
		servers = os.Getenv("WEIR_SERVERS")
	}
	if servers == "" {
		servers = "127.0.0.1:7611"
	}
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Servers = append(cfg.Servers, s)
		}
	}
	if ca := os.Getenv("WEIR_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return cfg, fmt.Errorf("weir: reading WEIR_CA: %w", err)
		}
		cfg.CA = pem
	}
	return cfg, nil
}

// Client reaches a Weir cluster over its HTTP/JSON API. It is safe for concurrent use;
// Close it when done (its sessions are closed with it).
type Client struct {
	t      *transport
	tenant string
}

// New makes a client; it connects lazily.
func New(cfg Config) (*Client, error) {
	t, err := newTransport(cfg)
	if err != nil {
		return nil, err
	}
	tenant := cfg.Tenant
	if tenant == "" {
		tenant = "default"
	}
	return &Client{t: t, tenant: tenant}, nil
}

// Tenant answers the client's tenant.
func (c *Client) Tenant() string { return c.tenant }

// InTenant answers a client for another tenant over the same connections.
func (c *Client) InTenant(tenant string) *Client { return &Client{t: c.t, tenant: tenant} }

// Close lets go of idle connections. Sessions should be closed first.
func (c *Client) Close() { c.t.close() }

func q(s string) string { return url.PathEscape(s) }

func (c *Client) tpath(format string, args ...any) string {
	return "/v1/tenants/" + q(c.tenant) + fmt.Sprintf(format, args...)
}

// Do sends any request of the API (path from /v1) and decodes its 2xx answer into out.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.t.call(ctx, method, path, body, out)
}

// LimitSpec defines a limit. Burst 0 is max(ceil(PerSecond), 1); KeysMax 0 is 1000 when
// keyed.
type LimitSpec struct {
	Concurrent uint32
	PerSecond  float64
	Burst      uint32
	Keyed      bool
	KeysMax    uint32
	Shadow     bool
}

// DefineLimit defines a limit of the client's tenant, or changes its spec (admin).
func (c *Client) DefineLimit(ctx context.Context, name string, spec LimitSpec) error {
	body := map[string]any{
		"concurrent": spec.Concurrent, "per_second": spec.PerSecond,
		"keyed": spec.Keyed, "shadow": spec.Shadow,
	}
	if spec.Burst > 0 {
		body["burst"] = spec.Burst
	}
	if spec.KeysMax > 0 {
		body["keys_max"] = spec.KeysMax
	}
	return c.t.call(ctx, "PUT", c.tpath("/limits/%s", q(name)), body, nil)
}

// RemoveLimit removes a limit; its waiters are refused with LimitRemoved.
func (c *Client) RemoveLimit(ctx context.Context, name string) error {
	return c.t.call(ctx, "DELETE", c.tpath("/limits/%s", q(name)), nil, nil)
}

// LimitStatus is a limit's (or one key's) spec and use.
type LimitStatus struct {
	Tenant     string  `json:"tenant"`
	Name       string  `json:"name"`
	Concurrent uint64  `json:"concurrent"`
	PerSecond  float64 `json:"per_second"`
	Burst      uint64  `json:"burst"`
	InUse      uint64  `json:"in_use"`
	Waiting    uint64  `json:"waiting"`
	MaxInUse   uint64  `json:"max_in_use"`
	Tokens     uint64  `json:"tokens"`
	Removing   bool    `json:"removing"`
	KeysMax    *uint64 `json:"keys_max"`
	Shadow     bool    `json:"shadow"`
}

// PlaceTenant places the client's tenant in data group group once and for good, on a
// cluster of several Raft groups (admin); with group nil it finds where the tenant lives
// and places it in the default group if nowhere. It answers the group the tenant lives in;
// another group than the one it has fails ErrWrongGroup naming that one. A cluster of one
// group answers 0 for every tenant.
func (c *Client) PlaceTenant(ctx context.Context, group *uint64) (uint64, error) {
	var placed struct {
		Group uint64 `json:"group"`
	}
	err := c.t.call(ctx, "PUT", c.tpath("/placement"), map[string]any{"group": group}, &placed)
	return placed.Group, err
}

// Limit reads a limit's status.
func (c *Client) Limit(ctx context.Context, name string) (LimitStatus, error) {
	var s LimitStatus
	err := c.t.call(ctx, "GET", c.tpath("/limits/%s", q(name)), nil, &s)
	return s, err
}

// LimitKey reads one key's status of a keyed limit.
func (c *Client) LimitKey(ctx context.Context, name, key string) (LimitStatus, error) {
	var s LimitStatus
	err := c.t.call(ctx, "GET", c.tpath("/limits/%s/keys/%s", q(name), q(key)), nil, &s)
	return s, err
}

// Part is one more limit of a several-part request, with its key (keyed limits) and units.
type Part struct {
	Limit string `json:"limit"`
	Key   string `json:"key,omitempty"`
	Units uint32 `json:"units"`
}

// TakeOptions shapes a take; the zero value takes one token.
type TakeOptions struct {
	Key   string
	Units uint32
	Parts []Part
	Agent string
}

// Taken is a take's answer: Remaining is the bucket's tokens after it (nil for a key or
// several parts).
type Taken struct {
	Taken     uint64  `json:"taken"`
	Remaining *uint64 `json:"remaining"`
}

// Take takes tokens from a rate-only limit, without a session: all parts or none
// (ErrBusy, with RetryAfter).
func (c *Client) Take(ctx context.Context, limit string, o TakeOptions) (Taken, error) {
	body := map[string]any{}
	if o.Key != "" {
		body["key"] = o.Key
	}
	if o.Units > 0 {
		body["units"] = o.Units
	}
	if len(o.Parts) > 0 {
		body["parts"] = o.Parts
	}
	if o.Agent != "" {
		body["agent"] = o.Agent
	}
	var t Taken
	err := c.t.call(ctx, "POST", c.tpath("/limits/%s/take", q(limit)), body, &t)
	return t, err
}

// Halt is one halt of a tenant: scope "tenant" or "agent" (with Agent).
type Halt struct {
	Scope  string `json:"scope"`
	Agent  string `json:"agent,omitempty"`
	Reason string `json:"reason"`
}

// SetHalt halts the whole tenant (admin): its acquires and reserves are refused, its
// queued tickets refused, its holders told.
func (c *Client) SetHalt(ctx context.Context, reason string) error {
	return c.t.call(ctx, "PUT", c.tpath("/halt"), map[string]any{"reason": reason}, nil)
}

// ClearHalt clears the tenant's halt (admin).
func (c *Client) ClearHalt(ctx context.Context) error {
	return c.t.call(ctx, "DELETE", c.tpath("/halt"), nil, nil)
}

// SetAgentHalt halts one agent of the tenant (admin).
func (c *Client) SetAgentHalt(ctx context.Context, agent, reason string) error {
	return c.t.call(ctx, "PUT", c.tpath("/agents/%s/halt", q(agent)), map[string]any{"reason": reason}, nil)
}

// ClearAgentHalt clears an agent's halt (admin).
func (c *Client) ClearAgentHalt(ctx context.Context, agent string) error {
	return c.t.call(ctx, "DELETE", c.tpath("/agents/%s/halt", q(agent)), nil, nil)
}

// Halts lists the tenant's halts, tenant-wide first.
func (c *Client) Halts(ctx context.Context) ([]Halt, error) {
	var out struct {
		Halts []Halt `json:"halts"`
	}
	err := c.t.call(ctx, "GET", c.tpath("/halts"), nil, &out)
	return out.Halts, err
}

// ReserveOptions shapes a run's admission: its agent, the budget period, and a hold (an
// upper bound on what the run may spend).
type ReserveOptions struct {
	Agent      string
	Period     string
	HoldTokens uint64
	HoldMinor  uint64
}

// Reserve admits a run (idempotent by run): ErrTooManyRuns, ErrBudgetExhausted, ErrHalted.
func (c *Client) Reserve(ctx context.Context, run string, o ReserveOptions) error {
	body := map[string]any{}
	if o.Agent != "" {
		body["agent"] = o.Agent
	}
	if o.Period != "" {
		body["period"] = o.Period
	}
	if o.HoldTokens > 0 {
		body["hold_tokens"] = o.HoldTokens
	}
	if o.HoldMinor > 0 {
		body["hold_minor"] = o.HoldMinor
	}
	return c.t.call(ctx, "POST", c.tpath("/runs/%s/reserve", q(run)), body, nil)
}

// ReleaseRun frees a run's slot (idempotent).
func (c *Client) ReleaseRun(ctx context.Context, run string) error {
	return c.t.call(ctx, "POST", c.tpath("/runs/%s/release", q(run)), map[string]any{}, nil)
}

// RunSettlement is one pass's spend, charged once per (run, epoch).
type RunSettlement struct {
	Epoch       uint64
	Period      string
	Tokens      uint64
	MinorUnits  uint64
	ReleaseSlot bool
}

// SettleRun charges a pass's spend (idempotent by epoch; another payload for the same
// epoch is ErrConflict). It answers whether it was a duplicate.
func (c *Client) SettleRun(ctx context.Context, run string, s RunSettlement) (duplicate bool, err error) {
	body := map[string]any{
		"epoch": s.Epoch, "tokens": s.Tokens, "minor_units": s.MinorUnits,
		"release_slot": s.ReleaseSlot,
	}
	if s.Period != "" {
		body["period"] = s.Period
	}
	var out struct {
		Duplicate bool `json:"duplicate"`
	}
	err = c.t.call(ctx, "POST", c.tpath("/runs/%s/settle", q(run)), body, &out)
	return out.Duplicate, err
}

// Spent is what a period was charged.
type Spent struct {
	Tokens        uint64 `json:"tokens"`
	MinorUnits    uint64 `json:"minor_units"`
	HeldTokens    uint64 `json:"held_tokens"`
	HeldMinor     uint64 `json:"held_minor"`
	OverrunTokens uint64 `json:"overrun_tokens"`
	OverrunMinor  uint64 `json:"overrun_minor"`
}

// Spent reads a period's spend.
func (c *Client) Spent(ctx context.Context, period string) (Spent, error) {
	var s Spent
	err := c.t.call(ctx, "GET", c.tpath("/spent/%s", q(period)), nil, &s)
	return s, err
}

// Ceilings sets the tenant's ceilings (admin); a nil field is left as it is.
type Ceilings struct {
	MaxRunning   *uint64
	BudgetTokens *uint64
	BudgetMinor  *uint64
}

// SetCeilings sets the tenant's run slots and budgets (admin).
func (c *Client) SetCeilings(ctx context.Context, x Ceilings) error {
	body := map[string]any{}
	if x.MaxRunning != nil {
		body["max_running"] = *x.MaxRunning
	}
	if x.BudgetTokens != nil {
		body["budget_tokens"] = *x.BudgetTokens
	}
	if x.BudgetMinor != nil {
		body["budget_minor"] = *x.BudgetMinor
	}
	return c.t.call(ctx, "PUT", "/v1/tenants/"+q(c.tenant), body, nil)
}
