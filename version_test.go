package flowstate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// semverPre1 is a version below 1.0.0 as semantic versioning writes it:
// 0.MINOR.PATCH with an optional pre-release, no leading v.
var semverPre1 = regexp.MustCompile(`^0\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// field returns the value of the first line "key<sep>value" of the lines
// after the line start ("" for the whole file), unquoted.
func field(t *testing.T, path, start, key, sep string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(read(t, path)))
	in := start == ""
	for sc.Scan() {
		line := sc.Text()
		if !in {
			in = strings.TrimSpace(line) == start
			continue
		}
		if v, ok := strings.CutPrefix(line, key+sep); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("%s: no %q%s line", path, key, sep)
	return ""
}

func TestVersionIsOneSemanticVersionBelow1(t *testing.T) {
	v := Version()
	if !semverPre1.MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version below 1.0.0 (0.MINOR.PATCH)", v)
	}
	if raw := read(t, "VERSION"); raw != v+"\n" {
		t.Errorf("VERSION holds %q: one line, the version and a newline", raw)
	}
}

// TestEveryPlaceNamesTheVersionOfVERSION: each file that states the
// release's version states VERSION's.
func TestEveryPlaceNamesTheVersionOfVERSION(t *testing.T) {
	v := Version()
	for _, c := range []struct{ place, got string }{
		{"deploy/helm/flowstate/Chart.yaml version", field(t, "deploy/helm/flowstate/Chart.yaml", "", "version", ": ")},
		{"deploy/helm/flowstate/Chart.yaml appVersion", field(t, "deploy/helm/flowstate/Chart.yaml", "", "appVersion", ": ")},
		{"clients/rust/Cargo.toml [package] version", field(t, "clients/rust/Cargo.toml", "[package]", "version", " = ")},
		{"clients/rust/Cargo.lock flowstate-client", field(t, "clients/rust/Cargo.lock", `name = "flowstate-client"`, "version", " = ")},
		{"e2e/js/package.json version", packageJSON(t).Version},
	} {
		if c.got != v {
			t.Errorf("%s is %q, VERSION %q", c.place, c.got, v)
		}
	}
	if !strings.Contains(read(t, "CHANGELOG.md"), "\n## ["+v+"] ") {
		t.Errorf("CHANGELOG.md has no section \"## [%s] - <date>\"", v)
	}
	// The worker, its micro service and flowstate_build_info take Version
	// (cmd/worker's tests); the image's tag and label take the Makefile's
	// VERSION, which must be this one.
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed: the Makefile's VERSION and IMAGE are not checked")
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "version").CombinedOutput()
	if err != nil {
		t.Fatalf("make version: %v\n%s", err, out)
	}
	if want := "VERSION=" + v + "\nIMAGE=flowstate:" + v + "\n"; string(out) != want {
		t.Errorf("make version prints %q, want %q", out, want)
	}
}

type npmPackage struct {
	Version string `json:"version"`
	License string `json:"license"`
}

func packageJSON(t *testing.T) npmPackage {
	t.Helper()
	var p npmPackage
	if err := json.Unmarshal([]byte(read(t, "e2e/js/package.json")), &p); err != nil {
		t.Fatalf("e2e/js/package.json: %v", err)
	}
	return p
}

// TestLicenceIsApache2Everywhere: LICENSE is the Apache License 2.0, each
// package names it by its SPDX identifier, and nothing says NOASSERTION.
func TestLicenceIsApache2Everywhere(t *testing.T) {
	lic := read(t, "LICENSE")
	for _, s := range []string{"Apache License\n                           Version 2.0, January 2004", "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License to your work."} {
		if !strings.Contains(lic, s) {
			t.Errorf("LICENSE lacks %q: not the Apache License 2.0's full text", s)
		}
	}
	if got, err := os.Readlink("clients/rust/LICENSE"); err != nil || got != "../../LICENSE" {
		t.Errorf("clients/rust/LICENSE links to %q (%v), want ../../LICENSE, so that the crate ships the licence", got, err)
	}
	for _, c := range []struct{ place, got string }{
		{"clients/rust/Cargo.toml license", field(t, "clients/rust/Cargo.toml", "[package]", "license", " = ")},
		{"e2e/js/package.json license", packageJSON(t).License},
		{"deploy/helm/flowstate/Chart.yaml artifacthub.io/license", field(t, "deploy/helm/flowstate/Chart.yaml", "annotations:", "  artifacthub.io/license", ": ")},
	} {
		if c.got != "Apache-2.0" {
			t.Errorf("%s is %q, want Apache-2.0", c.place, c.got)
		}
	}
	if !strings.Contains(read(t, "deploy/image/Containerfile"), `org.opencontainers.image.licenses="Apache-2.0"`) {
		t.Error(`deploy/image/Containerfile does not label the image org.opencontainers.image.licenses="Apache-2.0"`)
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "target":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || path == "version_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("NOASSERTION")) {
			t.Errorf("%s says NOASSERTION", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
