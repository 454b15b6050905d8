package deploytest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// imageTimeout bounds the image's build (a static go build and the
// builder), and imageStep each command after it.
const (
	imageTimeout = 5 * time.Minute
	imageStep    = time.Minute
)

const testImage = "localhost/flowstate:deploy-test"

// builder is podman, else buildah; the test skips without either.
func builder(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"podman", "buildah"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	t.Skip("neither podman nor buildah is installed: the image is not built (apt-get install podman)")
	return ""
}

func run(t *testing.T, timeout time.Duration, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer within %v", name, strings.Join(args, " "), timeout)
	}
	if err != nil {
		return out, errors.New(err.Error() + ": " + errb.String())
	}
	return out, nil
}

func TestImage(t *testing.T) {
	b := builder(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(raw))
	if out, err := run(t, imageTimeout, "make", "-C", root, "image", "IMAGE="+testImage); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, imageStep, b, "rmi", "-f", testImage) })

	out, err := run(t, imageStep, b, "inspect", "--type", "image", testImage)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var inspected []struct {
		Config struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			Env          []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
		}
		RootFS struct{ Layers []string }
	}
	if err := json.Unmarshal(out, &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	cfg := inspected[0].Config
	if cfg.User != "65532:65532" {
		t.Errorf("user %q, want the numeric non-root 65532:65532", cfg.User)
	}
	const entry = "/usr/local/bin/flowstate-worker"
	if !reflect.DeepEqual(cfg.Entrypoint, []string{entry}) {
		t.Errorf("entrypoint %q, want [%s]", cfg.Entrypoint, entry)
	}
	if _, ok := cfg.ExposedPorts["9090/tcp"]; !ok {
		t.Errorf("exposed ports %v, want the metrics port 9090/tcp", cfg.ExposedPorts)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.source":   "https://github.com/flowstate-io/flowstate",
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if got := cfg.Labels[k]; got != want {
			t.Errorf("label %s %q, want %q", k, got, want)
		}
	}
	if len(inspected[0].RootFS.Layers) != 1 {
		t.Errorf("%d layers, want the binary's one on an empty base", len(inspected[0].RootFS.Layers))
	}

	t.Run("the binary inside runs", func(t *testing.T) {
		bin := extractWorker(t, b, entry)
		out, err := run(t, imageStep, bin, "--help")
		if err != nil {
			t.Fatalf("%s --help: %v", entry, err)
		}
		if !strings.Contains(string(out), "FLOWSTATE_NATS_URL") {
			t.Errorf("--help of the image's binary:\n%s", out)
		}
		out, err = run(t, imageStep, bin, "--version")
		if err != nil {
			t.Fatalf("%s --version: %v", entry, err)
		}
		if !strings.HasPrefix(string(out), "flowstate worker "+version+"\n") {
			t.Errorf("--version of the image's binary does not name %s:\n%s", version, out)
		}
	})

	t.Run("a container runs", func(t *testing.T) {
		if filepath.Base(b) != "podman" {
			t.Skip("buildah builds images but does not run containers")
		}
		out, err := run(t, imageStep, b, "run", "--rm", "--network", "none", testImage, "--help")
		if err != nil && strings.Contains(err.Error(), "OCI permission denied") {
			t.Skipf("this machine's sandbox lets podman build but not start a container: %v", err)
		}
		if err != nil {
			t.Fatalf("podman run --help: %v", err)
		}
		if !strings.Contains(string(out), "FLOWSTATE_NATS_URL") {
			t.Errorf("--help in the container:\n%s", out)
		}
	})
}

// extractWorker copies the entrypoint's file out of the image (a container
// created, not started, and exported) and returns its path.
func extractWorker(t *testing.T, b, entry string) string {
	t.Helper()
	name := "flowstate-deploy-test-" + filepath.Base(t.TempDir())
	var id []byte
	var err error
	if filepath.Base(b) == "buildah" {
		id, err = run(t, imageStep, b, "from", "--name", name, testImage)
	} else {
		id, err = run(t, imageStep, b, "create", "--name", name, testImage)
	}
	if err != nil {
		t.Fatalf("create a container of the image: %v", err)
	}
	t.Cleanup(func() { run(t, imageStep, b, "rm", "-f", strings.TrimSpace(string(id))) })
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "fs.tar")
	if filepath.Base(b) == "buildah" {
		// buildah has no export: mount the container's file system (as
		// root, or within `buildah unshare`) and archive it.
		mnt, err := run(t, imageStep, b, "mount", name)
		if err != nil {
			t.Skipf("buildah cannot mount the container here: %v", err)
		}
		defer run(t, imageStep, b, "umount", name)
		if _, err := run(t, imageStep, "tar", "-C", strings.TrimSpace(string(mnt)), "-cf", tarPath, "."); err != nil {
			t.Fatalf("archive the container's file system: %v", err)
		}
	} else if _, err := run(t, imageStep, b, "export", "-o", tarPath, name); err != nil {
		t.Fatalf("export: %v", err)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	want := strings.TrimPrefix(entry, "/")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the image", entry)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") != want {
			continue
		}
		if h.Mode&0o111 == 0 {
			t.Errorf("%s has mode %o: not executable", entry, h.Mode)
		}
		bin := filepath.Join(dir, "worker")
		out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return bin
	}
}
