package config

import (
	"bytes"
	"fmt"
	"net/url"

	"go.yaml.in/yaml/v3"
)

// Redacted returns the config as YAML for /config_dump and logs: secrets
// appear only as their references (env:NAME, file:PATH), virtual keys
// given by secret show no derived hash, the alert webhook shows only its
// scheme and host (webhook paths are often tokens), and any header value
// that looks like a credential is replaced. The output parses back with
// Parse when the referenced secrets are available.
func Redacted(c *Config) ([]byte, error) {
	if c == nil {
		return nil, fmt.Errorf("redacting config: nil config")
	}
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, fmt.Errorf("redacting config: %w", err)
	}
	for _, tn := range seqItems(mappingValue(&doc, "tenants")) {
		for _, kn := range seqItems(mappingValue(tn, "keys")) {
			if s := mappingValue(kn, "secret"); s != nil && s.Value != "" {
				removeKey(kn, "hash")
			}
		}
	}
	if w := mappingValue(mappingValue(&doc, "alerts"), "webhook_url"); w != nil && w.Value != "" {
		w.Value = redactWebhook(w.Value)
	}
	for _, bn := range seqItems(mappingValue(&doc, "backends")) {
		if u := mappingValue(bn, "base_url"); u != nil {
			u.Value = redactURL(u.Value)
		}
		if h := mappingValue(bn, "headers"); h != nil && h.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(h.Content); i += 2 {
				if credentialHeader(h.Content[i].Value) {
					h.Content[i+1].Value = "REDACTED"
				}
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString("# swarmgate config (redacted: secrets are shown as references only)\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("redacting config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("redacting config: %w", err)
	}
	return buf.Bytes(), nil
}

func seqItems(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func removeKey(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

func redactWebhook(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "REDACTED"
	}
	return u.Scheme + "://" + u.Host + "/REDACTED"
}
