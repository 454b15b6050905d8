package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkerServesOverMutualTLS runs nats-server with TLS that verifies
// client certificates, all made by the test: a CA, a server certificate for
// 127.0.0.1 and client certificates. The worker, given a tls:// URL and
// --tls-ca, --tls-cert and --tls-key, serves over it. A client without a
// certificate is refused, so the server does verify them.
func TestWorkerServesOverMutualTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, t.TempDir())
	conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: 2\n}\n",
		pki.serverCert, pki.serverKey, pki.ca)
	clientTLS := []nats.Option{nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey)}
	srv := startConfServer(t, "tls", conf, clientTLS...)
	require.Error(t, srv.connectErr(nats.RootCAs(pki.ca)), "a client without a certificate is refused")

	w := launchWorker(t, nil, "--nats-url", srv.URL,
		"--tls-ca", pki.ca, "--tls-cert", pki.workerCert, "--tls-key", pki.workerKey)
	c := dialClient(t, w, clientTLS...)
	_, err := c.nc.TLSConnectionState()
	require.NoError(t, err, "the client's connection is TLS")
	awaitServing(t, w, c)
	requireServes(t, c, 7)
	assert.NotContains(t, w.Stderr(), "level=ERROR", "worker errors")
}

// testPKI is the files of a CA and the certificates it signed, PEM.
type testPKI struct {
	ca                    string
	serverCert, serverKey string
	workerCert, workerKey string
	clientCert, clientKey string
}

// newTestPKI makes a CA, a server certificate for the IP 127.0.0.1, and
// client certificates for the worker and a client, valid for an hour, in
// dir.
func newTestPKI(t testing.TB, dir string) testPKI {
	t.Helper()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "flowstate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	p := testPKI{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	serial := int64(1)
	issue := func(name string, usage x509.ExtKeyUsage, ips ...net.IP) (certFile, keyFile string) {
		serial++
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		certFile, keyFile = filepath.Join(dir, name+"-cert.pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = issue("server", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	p.workerCert, p.workerKey = issue("worker", x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = issue("frontend", x509.ExtKeyUsageClientAuth)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func writePEM(t testing.TB, path, blockType string, der []byte) {
	t.Helper()
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})))
}
