package trust_test

import (
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
