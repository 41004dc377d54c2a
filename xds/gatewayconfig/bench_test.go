package gatewayconfig

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/internal/config"
	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
)

// bigConfig: 1,000 models × 3 backends × 20 keys (as in xds/server's scale
// tests), the size a replica decodes on every update.
func bigConfig(b *testing.B) *config.Config {
	var s strings.Builder
	s.WriteString("backends:\n")
	for m := 0; m < 1000; m++ {
		for j := 0; j < 3; j++ {
			fmt.Fprintf(&s, "  - name: b%d-%d\n    base_url: http://10.%d.%d.%d:8000/v1\n    keys:\n", m, j, j, m/250, m%250+1)
			for k := 0; k < 20; k++ {
				fmt.Fprintf(&s, "      - {id: k%d-%d-%d, secret: env:K, rpm: 500, tpm: 100000}\n", m, j, k)
			}
		}
	}
	s.WriteString("models:\n")
	for m := 0; m < 1000; m++ {
		fmt.Fprintf(&s, "  - {name: model-%d, targets: [{backend: b%d-0}, {backend: b%d-1}, {backend: b%d-2, priority: 1}]}\n", m, m, m, m)
	}
	cfg, err := config.Parse([]byte(s.String()), "big.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

func BenchmarkFromConfig1000(b *testing.B) {
	cfg := bigConfig(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromConfig(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplicaDecode1000 is a replica's cost per update: unmarshal the
// resource and rebuild the validated config (secrets resolved locally).
func BenchmarkReplicaDecode1000(b *testing.B) {
	gc, err := FromConfig(bigConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	wire, err := proto.Marshal(gc)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(wire)))
	env := config.Options{LookupEnv: func(string) (string, bool) { return "sk-x", true }}
	b.ReportAllocs()
	for b.Loop() {
		gc := new(pb.GatewayConfig)
		if err := proto.Unmarshal(wire, gc); err != nil {
			b.Fatal(err)
		}
		if _, err := ToConfig(gc, env); err != nil {
			b.Fatal(err)
		}
	}
}
