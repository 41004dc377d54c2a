package translator

import "testing"

func TestTranslateValid(t *testing.T) {
	for _, name := range []string{"default.yaml", "mixed.yaml"} {
		t.Run(name, func(t *testing.T) {
			cfg := loadTestdata(t, name)
			r, err := Translate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps := Endpoints(r.IR, EndpointState{Addrs: map[string][]string{"api.openai.com": {"192.0.2.1"}, "relay.example.net": {"192.0.2.2"}}})
			if err := ValidateEndpoints(eps); err != nil {
				t.Fatal(err)
			}
		})
	}
}
