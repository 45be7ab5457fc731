package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gprofile/gprofile/internal/push"
)

// Environment variables that hold push credentials, so that they need
// not be in the command line (which ps shows every user).
const (
	envBearerToken = "GPROFILE_PUSH_BEARER_TOKEN"
	envBasicAuth   = "GPROFILE_PUSH_BASIC_AUTH" // user:password
)

// pushOptions turns the --push-* flags (and the credential environment
// variables) into the backends' HTTP options: a client with the TLS roots
// and timeouts, and the headers of every request. Its errors name the
// flag or file that is wrong.
func pushOptions(c *contOptions, getenv func(string) string) (push.Options, error) {
	h := http.Header{}
	for _, kv := range c.headers {
		k, v, _ := strings.Cut(kv, ":")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if c.tenant != "" {
		h.Set("X-Scope-OrgID", c.tenant)
	}
	token, err := secret(c.bearerFile, "--push-bearer-token-file", getenv(envBearerToken))
	if err != nil {
		return push.Options{}, err
	}
	basic, err := secret(c.basicAuthFile, "--push-basic-auth-file", getenv(envBasicAuth))
	if err != nil {
		return push.Options{}, err
	}
	switch {
	case token != "" && basic != "":
		return push.Options{}, fmt.Errorf("both a bearer token and basic auth are set (flags or $%s, $%s): give one", envBearerToken, envBasicAuth)
	case token != "":
		h.Set("Authorization", "Bearer "+token)
	case basic != "":
		if !strings.Contains(basic, ":") {
			return push.Options{}, fmt.Errorf("basic auth: want user:password (from --push-basic-auth-file or $%s)", envBasicAuth)
		}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basic)))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return push.Options{}, fmt.Errorf("--push-ca: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return push.Options{}, fmt.Errorf("--push-ca %s: no PEM certificate in it", c.caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return push.Options{Client: &http.Client{Transport: tr}, Header: h}, nil
}

// secret reads a credential from file (its first line, trimmed), else
// returns env's value; flag names the file's flag for errors.
func secret(file, flag, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("%s %s: the file is empty", flag, file)
	}
	return line, nil
}
