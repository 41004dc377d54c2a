// Package replica is the xDS client an ext_proc replica runs: it subscribes
// to swarmgate.v1.GatewayConfig over ADS (State of the World) and hands each
// valid update, as a validated *config.Config, to a callback.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
	"github.com/swarmgate/swarmgate/xds/gatewayconfig"
)

// Options configure a replica's subscription.
type Options struct {
	// NodeID identifies this replica (host name, pod name). The node cluster
	// is always contract.NodeExtProc: replicas share one snapshot.
	NodeID string
	// Load resolves the secret references locally (env:, file:).
	Load   config.Options
	Logger *slog.Logger
	// Backoff between reconnects: doubles from MinBackoff up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// SecretPoll is how often the files of the applied config's file:
	// secrets are checked (default 5s); one that holds another value
	// applies the config again, resolved anew.
	SecretPoll time.Duration
}

// Run subscribes until ctx is done, reconnecting with backoff. apply is called
// with every update that converts and validates; an invalid one is NACKed
// (the control plane logs and counts it) and the replica keeps its config.
func Run(ctx context.Context, conn grpc.ClientConnInterface, opts Options, apply func(*config.Config)) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	if opts.SecretPoll <= 0 {
		opts.SecretPoll = 5 * time.Second
	}
	log := opts.Logger
	c := &client{ads: discoveryv3.NewAggregatedDiscoveryServiceClient(conn), opts: opts, log: log, apply: apply}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() { defer close(polled); c.pollSecrets(pollCtx) }()
	defer func() { stopPoll(); <-polled }()
	backoff := opts.MinBackoff
	for {
		started := time.Now()
		err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > 10*opts.MinBackoff {
			backoff = opts.MinBackoff // it had been working: reconnect fast
		}
		log.Warn("xDS stream ended, reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, opts.MaxBackoff)
	}
}

type client struct {
	ads      discoveryv3.AggregatedDiscoveryServiceClient
	opts     Options
	log      *slog.Logger
	apply    func(*config.Config)
	accepted string // last version applied, kept across reconnects

	mu        sync.Mutex // serialises apply between the stream and pollSecrets
	lastGC    *pb.GatewayConfig
	lastCfg   *config.Config
	secretErr string // the last reload error pollSecrets logged
}

// pollSecrets applies the last config again, its secrets resolved anew,
// when a file: secret's file holds another value (a provider key rotated
// in place on this replica's volume): the control plane sends no new
// config for a change only the replica's files see.
func (c *client) pollSecrets(ctx context.Context) {
	t := time.NewTicker(c.opts.SecretPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		if c.lastCfg != nil && c.lastCfg.SecretFilesChanged() {
			cfg, err := gatewayconfig.ToConfig(c.lastGC, c.opts.Load)
			if err != nil {
				if err.Error() != c.secretErr { // once per error, not every poll
					c.log.Error("a secret file changed and the config no longer loads; keeping the current one", "err", err)
					c.secretErr = err.Error()
				}
			} else {
				c.log.Info("a secret file changed; applying the config again", "version", c.accepted)
				c.lastCfg = cfg
				c.apply(cfg)
			}
		}
		c.mu.Unlock()
	}
}

func (c *client) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.ads.StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("opening ADS stream: %w", err)
	}
	node := &corev3.Node{Id: c.opts.NodeID, Cluster: contract.NodeExtProc}
	req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: gatewayconfig.TypeURL, VersionInfo: c.accepted}
	if err := st.Send(req); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: gatewayconfig.TypeURL, ResponseNonce: resp.GetNonce()}
		gc, cfg, err := decode(resp, c.opts.Load)
		if err != nil {
			c.log.Error("rejecting gateway config from the control plane", "version", resp.GetVersionInfo(), "err", err)
			ack.VersionInfo = c.accepted
			ack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			c.mu.Lock()
			c.accepted = resp.GetVersionInfo()
			ack.VersionInfo = c.accepted
			c.log.Info("gateway config applied", "version", c.accepted)
			c.lastGC, c.lastCfg, c.secretErr = gc, cfg, ""
			c.apply(cfg)
			c.mu.Unlock()
		}
		if err := st.Send(ack); err != nil {
			return fmt.Errorf("acknowledging: %w", err)
		}
	}
}

var errNoResource = errors.New("response carries no GatewayConfig")

func decode(resp *discoveryv3.DiscoveryResponse, load config.Options) (*pb.GatewayConfig, *config.Config, error) {
	var gc *pb.GatewayConfig
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != gatewayconfig.TypeURL {
			continue
		}
		m := new(pb.GatewayConfig)
		if err := a.UnmarshalTo(m); err != nil {
			return nil, nil, fmt.Errorf("decoding GatewayConfig: %w", err)
		}
		if m.GetName() == gatewayconfig.ResourceName {
			gc = m
		}
	}
	if gc == nil {
		return nil, nil, errNoResource
	}
	cfg, err := gatewayconfig.ToConfig(gc, load)
	return gc, cfg, err
}
