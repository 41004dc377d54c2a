package server

import (
	"context"
	"crypto/x509"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
type nodeAuthorizer struct {
	grants []config.NodeGroupGrant
	groups *nodeGroup
	log    interface{ Warn(string, ...any) }

	mu      sync.Mutex
	streams map[int64]*streamAuth
}

type streamAuth struct {
	cert    *x509.Certificate
	checked bool
}

func (a *nodeAuthorizer) enabled() bool { return a != nil && len(a.grants) > 0 }

// open records the stream's peer certificate (only the open callback sees
// the stream's context).
func (a *nodeAuthorizer) open(ctx context.Context, id int64) error {
	if !a.enabled() {
		return nil
	}
	cert := trust.PeerCertificate(ctx)
	if cert == nil {
		return status.Error(codes.Unauthenticated, "xDS needs a client certificate")
	}
	if _, ok := a.grantsOf(cert); !ok {
		a.log.Warn("xDS client refused: identity has no node group", "identities", trust.Describe(cert))
		return status.Error(codes.PermissionDenied, "client identity has no xDS node group")
	}
	a.mu.Lock()
	a.streams[id] = &streamAuth{cert: cert}
	a.mu.Unlock()
	return nil
}

// closed forgets the stream and reports whether it had been let in (the
// server calls the close callback for refused opens too).
func (a *nodeAuthorizer) closed(id int64) bool {
	if !a.enabled() {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.streams[id]
	delete(a.streams, id)
	return ok
}

// request checks the node a request names. Envoy sends the node on the
// first request only (set_node_on_first_message_only); a stream's first
// request without one is filed under the Envoy group, as the cache does.
func (a *nodeAuthorizer) request(id int64, node *corev3.Node) error {
	if !a.enabled() {
		return nil
	}
	a.mu.Lock()
	st := a.streams[id]
	a.mu.Unlock()
	if st == nil {
		return status.Error(codes.PermissionDenied, "xDS stream not authorized")
	}
	if node == nil {
		if st.checked {
			return nil
		}
		node = &corev3.Node{}
	}
	group := a.groups.ID(node)
	role := a.roleOf(group)
	granted, _ := a.grantsOf(st.cert)
	for _, g := range granted {
		if g == role {
			st.checked = true
			return nil
		}
	}
	a.log.Warn("xDS node refused: its identity may not subscribe as this node group", "node", node.GetId(), "cluster", node.GetCluster(),
		"group", group, "identities", trust.Describe(st.cert))
	return status.Errorf(codes.PermissionDenied, "identity may not subscribe as node group %q", group)
}

// grantsOf is the union of the groups granted to the certificate's
// identities.
func (a *nodeAuthorizer) grantsOf(cert *x509.Certificate) ([]string, bool) {
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
