package swarm

import (
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/resolver"
)

// rrScheme is a gRPC resolver scheme whose targets ("swarmrr:///<n>") name
// a set of ext_proc replicas, balanced round robin per stream: Envoy's
// envoy_grpc cluster with several endpoints does the same per ext_proc
// stream, so the two filters of one request may reach different replicas.
const rrScheme = "swarmrr"

var (
	rrSets sync.Map // name -> []string
	rrNext atomic.Int64
)

// Registered once: resolver.Register is not safe to call concurrently with
// dials.
func init() { resolver.Register(rrBuilder{}) }

// roundRobinTarget returns a dial target spreading streams over addrs.
func roundRobinTarget(addrs ...string) string {
	name := strconv.FormatInt(rrNext.Add(1), 10)
	rrSets.Store(name, append([]string(nil), addrs...))
	return rrScheme + ":///" + name
}

type rrBuilder struct{}

func (rrBuilder) Scheme() string { return rrScheme }

func (rrBuilder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	v, _ := rrSets.Load(t.Endpoint())
	addrs, _ := v.([]string)
	st := resolver.State{ServiceConfig: cc.ParseServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}
	for _, a := range addrs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	return rrResolver{}, cc.UpdateState(st)
}

type rrResolver struct{}

func (rrResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (rrResolver) Close()                                {}
