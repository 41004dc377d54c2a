package server

import (
	"context"
	"crypto/x509"
	"slices"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/trust"
)

// nodeAuthorizer lets a client subscribe only as the node groups its
// verified certificate identity is granted (security.xds.node_groups): the
// GatewayConfig (every virtual-key hash) goes only to ext_proc replicas,
// the RateLimitConfig only to the rate-limit service, routes and clusters
// only to Envoy. A node naming a group its identity lacks, or a client
// whose identity has no grant, is refused with PermissionDenied. With no
// grants configured every node is served (the listener's own TLS policy
// still applies).
//
// The grants are those in force at each check: a config reload replaces
// them (setGrants), and a stream open for an identity that lost its grant
// gets no further response and is refused at its next request.
type nodeAuthorizer struct {
	groups *nodeGroup
	log    interface{ Warn(string, ...any) }

	// mu orders grant changes against the checks: a request checked
	// under the old grants has recorded its role before setGrants looks.
	mu      sync.Mutex
	grants  []config.NodeGroupGrant
	streams map[int64]*streamAuth
}

type streamAuth struct {
	cert  *x509.Certificate
	guard *streamGuard // nil for a stream that did not pass guardStreams
	// group and role are those of the last request let in ("" before).
	group, role string
}

func newNodeAuthorizer(grants []config.NodeGroupGrant, groups *nodeGroup, log interface{ Warn(string, ...any) }) *nodeAuthorizer {
	return &nodeAuthorizer{grants: slices.Clone(grants), groups: groups, log: log, streams: map[int64]*streamAuth{}}
}

// SetNodeGroups replaces the node group grants (security.xds.node_groups
// of a reloaded config) and returns the previous ones. A stream already
// serving a group its identity is no longer granted gets nothing more: its
// responses are refused and it ends with PermissionDenied at its next
// request or push, whichever comes first.
func (cp *ControlPlane) SetNodeGroups(grants []config.NodeGroupGrant) []config.NodeGroupGrant {
	return cp.authz.setGrants(grants)
}

// Granted reports whether cert may open an xDS stream under the grants in
// force: it holds a node group, or no grants are configured.
func (cp *ControlPlane) Granted(cert *x509.Certificate) bool {
	a := cp.authz
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.grants) == 0 {
		return true
	}
	_, ok := a.grantsOfLocked(cert)
	return ok
}

func (a *nodeAuthorizer) setGrants(grants []config.NodeGroupGrant) []config.NodeGroupGrant {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.grants
	a.grants = slices.Clone(grants)
	for _, st := range a.streams {
		if st.role != "" && !a.permitsLocked(st.cert, st.role) {
			st.guard.revoke()
			a.log.Warn("xDS stream cut: its identity lost the grant of its node group", "group", st.group, "identities", trust.Describe(st.cert))
		}
	}
	return prev
}

// open records the stream's peer certificate (only the open callback sees
// the stream's context), also when no grants are configured: a reload may
// configure some while the stream is open.
func (a *nodeAuthorizer) open(ctx context.Context, id int64) error {
	cert := trust.PeerCertificate(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.grants) > 0 {
		if cert == nil {
			return status.Error(codes.Unauthenticated, "xDS needs a client certificate")
		}
		if _, ok := a.grantsOfLocked(cert); !ok {
			a.log.Warn("xDS client refused: identity has no node group", "identities", trust.Describe(cert))
			return status.Error(codes.PermissionDenied, "client identity has no xDS node group")
		}
	}
	a.streams[id] = &streamAuth{cert: cert, guard: guardOf(ctx)}
	return nil
}

// closed forgets the stream and reports whether it had been let in (the
// server calls the close callback for refused opens too).
func (a *nodeAuthorizer) closed(id int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.streams[id]
	delete(a.streams, id)
	return ok
}

// request checks the node a request names against the grants in force.
// Envoy sends the node on the first request only
// (set_node_on_first_message_only): a later request without one is
// checked as the group of the stream's last one, a first request without
// one is filed under the Envoy group, as the cache does.
func (a *nodeAuthorizer) request(id int64, node *corev3.Node) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.streams[id]
	if st == nil {
		return status.Error(codes.PermissionDenied, "xDS stream not authorized")
	}
	group, role := st.group, st.role
	if node != nil || role == "" {
		if node == nil {
			node = &corev3.Node{}
		}
		group = a.groups.ID(node)
		role = a.roleOf(group)
	}
	if len(a.grants) > 0 && st.cert == nil {
		return status.Error(codes.Unauthenticated, "xDS needs a client certificate")
	}
	if !a.permitsLocked(st.cert, role) {
		a.log.Warn("xDS node refused: its identity may not subscribe as this node group", "node", node.GetId(), "cluster", node.GetCluster(),
			"group", group, "identities", trust.Describe(st.cert))
		return status.Errorf(codes.PermissionDenied, "identity may not subscribe as node group %q", group)
	}
	st.group, st.role = group, role
	return nil
}

// permitsLocked reports whether cert may subscribe as role: always with
// no grants configured.
func (a *nodeAuthorizer) permitsLocked(cert *x509.Certificate, role string) bool {
	if len(a.grants) == 0 {
		return true
	}
	granted, _ := a.grantsOfLocked(cert)
	return slices.Contains(granted, role)
}

// grantsOfLocked is the union of the groups granted to the certificate's
// identities.
func (a *nodeAuthorizer) grantsOfLocked(cert *x509.Certificate) ([]string, bool) {
	var out []string
	found := false
	for _, g := range a.grants {
		if trust.Matches(cert, g.Identity) {
			out = append(out, g.Groups...)
			found = true
		}
	}
	return out, found
}

// roleOf maps a snapshot group to its config name: the Envoy gateway group
// (and the proxyless gRPC group, which serves the same routes) is "envoy".
func (a *nodeAuthorizer) roleOf(group string) string {
	switch group {
	case contract.NodeExtProc:
		return config.GroupExtProc
	case contract.NodeRateLimit:
		return config.GroupRateLimit
	}
	return config.GroupEnvoy
}

// streamGuard stops the responses of a stream whose grant a reload
// removed. go-control-plane sends from its own loop with no callback that
// may refuse, and a stream idle between two pushes makes no request to
// refuse, so the check sits on the gRPC stream itself.
type streamGuard struct{ revoked atomic.Bool }

func (g *streamGuard) revoke() {
	if g != nil {
		g.revoked.Store(true)
	}
}

type guardKey struct{}

func guardOf(ctx context.Context) *streamGuard {
	g, _ := ctx.Value(guardKey{}).(*streamGuard)
	return g
}

var errRevoked = status.Error(codes.PermissionDenied, "client identity no longer granted this xDS node group")

// guardStreams is the xDS server's stream interceptor: it gives each
// stream a guard, reachable from the open callback through the stream's
// context.
func guardStreams(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	g := &streamGuard{}
	return h(srv, &guardedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), guardKey{}, g), guard: g})
}

type guardedStream struct {
	grpc.ServerStream
	ctx   context.Context
	guard *streamGuard
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) SendMsg(m any) error {
	if s.guard.revoked.Load() {
		return errRevoked
	}
	return s.ServerStream.SendMsg(m)
}
