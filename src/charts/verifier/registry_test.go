package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// The one user of the test registry.
const (
	registryUser     = "platform"
	registryPassword = "s3cret-pull-token"
)

// testRegistry is distribution's registry, in process, over TLS with a certificate of its own and
// htpasswd authentication: what a platform team's private registry asks of a client.
type testRegistry struct {
	server *httptest.Server
	// host:port
	host string
	// The PEM of the server's certificate, its own CA.
	ca string
}

// startRegistry starts a registry for one test.
func startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	logrus.SetOutput(io.Discard)
	hash, err := bcrypt.GenerateFromPassword([]byte(registryPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(registryUser+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := &configuration.Configuration{
		Storage: configuration.Storage{
			"inmemory":    configuration.Parameters{},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		},
		Auth: configuration.Auth{"htpasswd": configuration.Parameters{"realm": "test", "path": htpasswd}},
	}
	app := handlers.NewApp(context.Background(), config)
	server := httptest.NewUnstartedServer(app)
	// The tests that present no CA make the server log failed handshakes.
	server.Config.ErrorLog = log.New(io.Discard, "", 0)
	server.StartTLS()
	t.Cleanup(server.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	return &testRegistry{server: server, host: server.Listener.Addr().String(), ca: string(ca)}
}

// dockerConfig is a docker config holding the registry's credentials, as `docker login` writes it.
func (r *testRegistry) dockerConfig(password string) string {
	basic := base64.StdEncoding.EncodeToString([]byte(registryUser + ":" + password))
	return fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, r.host, basic)
}

// access is the registry access a request carries.
func (r *testRegistry) access() registryAccess {
	return registryAccess{DockerConfig: r.dockerConfig(registryPassword), CABundle: r.ca}
}

// transport trusts the registry's certificate, for the tests' own pushes.
func (r *testRegistry) transport() http.RoundTripper {
	pool := x509.NewCertPool()
	pool.AddCert(r.server.Certificate())
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
}

// repository is an oras client of one repository, logged in.
func (r *testRegistry) repository(t *testing.T, name string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(r.host + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	repo.Client = &auth.Client{
		Client:     &http.Client{Transport: r.transport()},
		Credential: auth.StaticCredential(r.host, auth.Credential{Username: registryUser, Password: registryPassword}),
	}
	return repo
}

// pushChart pushes a Helm chart (config and one archive layer, as `helm push` does) under tag and
// returns its manifest digest.
func (r *testRegistry) pushChart(t *testing.T, name, tag string, archive []byte) string {
	t.Helper()
	ctx := context.Background()
	repo := r.repository(t, name)
	config := []byte(`{"apiVersion":"v2","name":"app","version":"` + tag + `"}`)
	configDesc := content.NewDescriptorFromBytes("application/vnd.cncf.helm.config.v1+json", config)
	layerDesc := content.NewDescriptorFromBytes("application/vnd.cncf.helm.chart.content.v1.tar+gzip", archive)
	for _, blob := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{configDesc, config}, {layerDesc, archive}} {
		if err := repo.Push(ctx, blob.desc, bytes.NewReader(blob.data)); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		t.Fatal(err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	if err := repo.PushReference(ctx, desc, bytes.NewReader(manifest), tag); err != nil {
		t.Fatal(err)
	}
	return desc.Digest.String()
}

// wantRefused fails the test unless the answer refuses with code, its reason holding every word.
func wantRefused(t *testing.T, got answer, code string, words ...string) {
	t.Helper()
	if got.Verified || got.Error != nil || got.Refused != code {
		t.Fatalf("want refused %q, got %+v (error %+v)", code, got, got.Error)
	}
	for _, w := range words {
		if !strings.Contains(got.Reason, w) {
			t.Errorf("the reason %q does not say %q", got.Reason, w)
		}
	}
}

// wantVerified fails the test unless the answer verifies digest, by a signer whose name holds by.
func wantVerified(t *testing.T, got answer, digest, by string) {
	t.Helper()
	if !got.Verified || got.Digest != digest || !strings.Contains(got.By, by) {
		t.Fatalf("want verified %s by %q, got %+v (error %+v)", digest, by, got, got.Error)
	}
}

// wantError fails the test unless the answer is an error of kind, its message holding every word.
func wantError(t *testing.T, got answer, kind string, words ...string) {
	t.Helper()
	if got.Verified || got.Error == nil || got.Error.Kind != kind {
		t.Fatalf("want a %s error, got %+v (error %+v)", kind, got, got.Error)
	}
	for _, w := range words {
		if !strings.Contains(got.Error.Message, w) {
			t.Errorf("the error %q does not say %q", got.Error.Message, w)
		}
	}
}
