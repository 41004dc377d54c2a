package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestReloadRaisesMaxBodyBytes: after a reload raises
// request.max_body_bytes from 1 MiB to 16 MiB, a 3 MiB body reaches
// ext_proc's admission through the real gRPC server, and ext_proc's own
// check (413) enforces whichever value is in force. The server is built
// once: sized for the start-up value, it failed such a stream with
// ResourceExhausted while Envoy's buffer limit, following the reload, let
// the body through.
func TestReloadRaisesMaxBodyBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	xdsL, epL, adminL := listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	render := func(extra string) []byte {
		return fmt.Appendf(nil, gatewayYAML, xdsL.Addr(), epL.Addr(), rlsAddr, adminL.Addr(), rs.Addr, "127.0.0.1:9",
			config.HashKey("sk-team"), extra)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, render("request: {max_body_bytes: 1MiB}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, stop := startServe(t, ctx, path, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})
	defer stop()

	conn, err := grpc.NewClient(epL.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const body = 3 << 20
	if code, err := sendBody(ctx, conn, body); err != nil || code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d-byte body under max_body_bytes 1MiB: status %d, %v; want ext_proc's 413", body, code, err)
	}

	if err := os.WriteFile(path, render("request: {max_body_bytes: 16MiB}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "max_body_bytes 16MiB in force", func() bool { return g.Config().Request.MaxBodyBytes == 16<<20 })
	code, err := sendBody(ctx, conn, body)
	if err != nil {
		t.Fatalf("%d-byte body after the reload to 16MiB: %v", body, err)
	}
	if code == http.StatusRequestEntityTooLarge {
		t.Fatalf("%d-byte body after the reload to 16MiB: 413", body)
	}
	t.Logf("%d-byte body after the reload: admission answered %d (0: admitted)", body, code)
	// Above the reloaded value: ext_proc's own check, not the transport.
	if code, err := sendBody(ctx, conn, 17<<20); err != nil || code != http.StatusRequestEntityTooLarge {
		t.Fatalf("17 MiB body under max_body_bytes 16MiB: status %d, %v; want ext_proc's 413", code, err)
	}
}

// sendBody sends a chat completion of about n bytes to ext_proc's router
// as Envoy does in BUFFERED mode (headers, then the whole body in one
// message, no content-length so the body itself is checked) and returns
// the status of the answer to the body: 0 when ext_proc let it on.
func sendBody(ctx context.Context, conn *grpc.ClientConn, n int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(metadata.AppendToOutgoingContext(ctx, contract.GRPCRoleHeader, contract.RoleRouter))
	if err != nil {
		return 0, err
	}
	defer func() { _ = st.CloseSend() }()
	hdr := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hdr(":method", "POST"), hdr(":path", "/v1/chat/completions"),
			hdr(":authority", "gateway"), hdr("authorization", "Bearer sk-team"), hdr("content-type", "application/json")}}}}}); err != nil {
		return 0, err
	}
	resp, err := st.Recv()
	if err != nil {
		return 0, fmt.Errorf("headers: %w", err)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return 0, fmt.Errorf("headers answered %d: %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	prefix, suffix := `{"model":"small","messages":[{"role":"user","content":"`, `"}]}`
	b := prefix + strings.Repeat("a", max(0, n-len(prefix)-len(suffix))) + suffix
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(b), EndOfStream: true}}}); err != nil {
		return 0, err
	}
	if resp, err = st.Recv(); err != nil {
		return 0, fmt.Errorf("body: %w", err)
	}
	return int(resp.GetImmediateResponse().GetStatus().GetCode()), nil
}

// TestReloadMovingExtProcIsRefused: an edit of the watched file that moves
// listen.extproc is refused (counted, logged) and the process keeps its
// config, so the control plane never points Envoy at a port nothing
// listens on.
func TestReloadMovingExtProcIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	xdsL, epL, adminL := listen(t), listen(t), listen(t)
	rlsAddr := porttest.Addr(t)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(extproc string) {
		t.Helper()
		y := fmt.Sprintf(gatewayYAML, xdsL.Addr(), extproc, rlsAddr, adminL.Addr(), rs.Addr, "127.0.0.1:9", config.HashKey("sk-team"), "")
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(epL.Addr().String())
	g, stop := startServe(t, ctx, path, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})
	defer stop()

	write(porttest.Addr(t))
	eventually(t, ctx, "the edit is refused", func() bool {
		return strings.Contains(get(t, "http://"+adminL.Addr().String()+"/metrics"), "swarmgate_config_watch_rejected_total 1")
	})
	if c := g.Config(); c.Listen.ExtProc != epL.Addr().String() {
		t.Fatalf("listen.extproc in force %s, want the bound %s kept", c.Listen.ExtProc, epL.Addr())
	}
}
