package deploytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test, relative to this module.
const chartDir = "../helm/flowstate"

// helmTimeout bounds one helm command.
const helmTimeout = 2 * time.Minute

// helmBin is the helm command: FLOWSTATE_HELM (set by make deploy-test,
// which builds it), else ../../bin/helm. A test needing it skips when
// neither is there.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLOWSTATE_HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FLOWSTATE_HELM=%s: %v", p, err)
		}
		return p
	}
	p, err := filepath.Abs("../../bin/helm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no helm at %s and FLOWSTATE_HELM unset: `make deploy-test` builds it", p)
	}
	return p
}

// helm runs helm with args and returns its stdout, its stderr and its error.
func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("helm %s: no answer within %v", strings.Join(args, " "), helmTimeout)
	}
	return out.String(), errb.String(), err
}

// manifests are the objects of one rendering, decoded strictly.
type manifests struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	serviceAccount *corev1.ServiceAccount
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *serviceMonitor
	prometheusRule *prometheusRule
	kinds          []string
	raw            string
}

// serviceMonitor and prometheusRule are the fields of the
// prometheus-operator's kinds that the chart renders: a field the chart adds
// without a test here fails the strict decoding.
type crdHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

type serviceMonitor struct {
	crdHead
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				Action      string `json:"action"`
				TargetLabel string `json:"targetLabel"`
				Replacement string `json:"replacement"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	crdHead
	Spec struct {
		Groups []any `json:"groups"`
	} `json:"spec"`
}

// decodeStrict decodes one manifest's JSON into v, refusing unknown fields.
func decodeStrict(t *testing.T, js []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decoding %T strictly: %v\n%s", v, err, js)
	}
}

// render runs helm template with the --set values and decodes every object.
func render(t *testing.T, set ...string) manifests {
	t.Helper()
	args := []string{"template", "fs", chartDir, "--namespace", "flows"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, stderr, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, stderr)
	}
	m := manifests{raw: out}
	for _, doc := range strings.Split(out, "\n---") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if string(js) == "null" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		m.kinds = append(m.kinds, head.Kind)
		switch head.Kind {
		case "Deployment":
			m.deployment = new(appsv1.Deployment)
			decodeStrict(t, js, m.deployment)
		case "Service":
			m.service = new(corev1.Service)
			decodeStrict(t, js, m.service)
		case "ServiceAccount":
			m.serviceAccount = new(corev1.ServiceAccount)
			decodeStrict(t, js, m.serviceAccount)
		case "PodDisruptionBudget":
			m.pdb = new(policyv1.PodDisruptionBudget)
			decodeStrict(t, js, m.pdb)
		case "ServiceMonitor":
			m.serviceMonitor = new(serviceMonitor)
			decodeStrict(t, js, m.serviceMonitor)
		case "PrometheusRule":
			m.prometheusRule = new(prometheusRule)
			decodeStrict(t, js, m.prometheusRule)
		default:
			t.Fatalf("the chart renders a %q the test does not check:\n%s", head.Kind, doc)
		}
	}
	if m.deployment == nil || m.service == nil {
		t.Fatalf("no Deployment or no Service rendered: %v", m.kinds)
	}
	return m
}

// worker is the worker's container.
func (m manifests) worker(t *testing.T) corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "worker" {
		t.Fatalf("want one container named worker, got %d", len(cs))
	}
	return cs[0]
}

// env returns the worker's variable name, or nil.
func (m manifests) env(t *testing.T, name string) *corev1.EnvVar {
	t.Helper()
	c := m.worker(t)
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func (m manifests) envValue(t *testing.T, name string) string {
	t.Helper()
	e := m.env(t, name)
	if e == nil {
		t.Fatalf("no %s in the worker's environment", name)
	}
	return e.Value
}

func TestChartLints(t *testing.T) {
	for _, set := range [][]string{
		nil,
		{"worker.kv=jetstream"},
		{"worker.kv=jetstream", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"},
	} {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, stderr, err := helm(t, args...)
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s%s", set, err, out, stderr)
		}
	}
}

func TestDefaultsRunOneMemoryWorker(t *testing.T) {
	m := render(t)
	d := m.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", d.Spec.Replicas)
	}
	if got := m.envValue(t, "FLOWSTATE_KV"); got != "memory" {
		t.Errorf("FLOWSTATE_KV %q, want memory", got)
	}
	// A rolling update would start the new worker beside the old one, which
	// it refuses to serve beside.
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate for one memory-backed worker", d.Spec.Strategy.Type)
	}
	if m.pdb != nil {
		t.Error("a PodDisruptionBudget for a single memory-backed worker would block every drain")
	}
	if e := m.env(t, "FLOWSTATE_KV_REPLICAS"); e != nil {
		t.Errorf("a JetStream setting with kv memory: %+v", *e)
	}
	if got := m.envValue(t, "FLOWSTATE_NATS_URL"); got != "nats://nats:4222" {
		t.Errorf("FLOWSTATE_NATS_URL %q, want the nats chart's service", got)
	}
}

func TestMemoryRefusesASecondReplica(t *testing.T) {
	_, stderr, err := helm(t, "template", "fs", chartDir, "--set", "worker.kv=memory", "--set", "replicas=2")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("helm template with kv memory and 2 replicas: %v, want a failure", err)
	}
	for _, want := range []string{"replicas 2 with worker.kv memory", "refuses to serve", "worker.kv jetstream"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the failure does not say %q:\n%s", want, stderr)
		}
	}
	// One replica, given explicitly, is fine.
	if m := render(t, "worker.kv=memory", "replicas=1"); *m.deployment.Spec.Replicas != 1 {
		t.Errorf("replicas %d, want 1", *m.deployment.Spec.Replicas)
	}
}

func TestJetStreamRunsThreeWorkersAndABudget(t *testing.T) {
	m := render(t, "worker.kv=jetstream", "worker.kvReplicas=3", "worker.kvStorage=file")
	d := m.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", d.Spec.Replicas)
	}
	if m.pdb == nil {
		t.Fatal("no PodDisruptionBudget with three JetStream workers")
	}
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", mu)
	}
	if !reflect.DeepEqual(m.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("the PDB selects %v, the Deployment's pods are %v", m.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	for name, want := range map[string]string{"FLOWSTATE_KV": "jetstream", "FLOWSTATE_KV_REPLICAS": "3", "FLOWSTATE_KV_STORAGE": "file"} {
		if got := m.envValue(t, name); got != want {
			t.Errorf("%s %q, want %q", name, got, want)
		}
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("strategy %+v, want a rolling update one worker at a time", d.Spec.Strategy)
	}
	if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Error("three workers are not spread over nodes")
	}
	// Two workers are allowed, five too.
	if m := render(t, "worker.kv=jetstream", "replicas=5"); *m.deployment.Spec.Replicas != 5 {
		t.Errorf("replicas %d, want 5", *m.deployment.Spec.Replicas)
	}
}

func TestProbes(t *testing.T) {
	for _, kv := range []string{"memory", "jetstream"} {
		c := render(t, "worker.kv="+kv).worker(t)
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: liveness %+v, want an HTTP GET of /healthz", kv, c.LivenessProbe)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: readiness %+v, want an HTTP GET of /readyz", kv, c.ReadinessProbe)
		}
		if c.StartupProbe != nil && c.StartupProbe.HTTPGet.Path == "/readyz" {
			t.Errorf("%s: a startup probe on /readyz restarts a worker that waits for NATS", kv)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.String() != "metrics" {
				t.Errorf("%s: a probe on port %s, want the metrics port", kv, p.HTTPGet.Port.String())
			}
		}
		if got := findPort(c, "metrics"); got != 9090 {
			t.Errorf("%s: metrics containerPort %d, want 9090", kv, got)
		}
	}
}

func findPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func TestSecurityContext(t *testing.T) {
	m := render(t, "worker.kv=jetstream")
	pod := m.deployment.Spec.Template.Spec
	if ps := pod.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot ||
		ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", ps)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted: the worker never calls the Kubernetes API")
	}
	sc := m.worker(t).SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want drop ALL and none added", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccompProfile is not RuntimeDefault")
	}
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
}

func TestResourcesAndShutdown(t *testing.T) {
	m := render(t)
	c := m.worker(t)
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Fatalf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	// docs/performance.md: about 110 MB of RSS for 10,000 nodes x 10 flows.
	if req.Memory().Value() < 110e6 {
		t.Errorf("memory request %s is below the 110 MB of the default limits' state", req.Memory())
	}
	if lim.Memory().Cmp(*req.Memory()) < 0 {
		t.Errorf("memory limit %s below the request %s", lim.Memory(), req.Memory())
	}
	// The worker exits within 5 s of SIGTERM (cmd/worker shutdownTimeout).
	if g := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 5 {
		t.Errorf("terminationGracePeriodSeconds %v: want more than the worker's 5 s shutdown", g)
	}
}

// secretSentinel would be a credential if a template ever put a value in
// the pod spec.
const secretSentinel = "s3cr3t-do-not-render"

func TestCredentialsComeFromSecrets(t *testing.T) {
	t.Run("user and password", func(t *testing.T) {
		m := render(t, "nats.auth.secretName=nats-auth", "nats.auth.user=flowstate", "nats.auth.passwordKey=password")
		if got := m.envValue(t, "FLOWSTATE_NATS_USER"); got != "flowstate" {
			t.Errorf("FLOWSTATE_NATS_USER %q", got)
		}
		wantSecretRef(t, m, "FLOWSTATE_NATS_PASSWORD", "nats-auth", "password")
	})
	t.Run("token", func(t *testing.T) {
		m := render(t, "nats.auth.secretName=nats-auth", "nats.auth.tokenKey=token")
		wantSecretRef(t, m, "FLOWSTATE_NATS_TOKEN", "nats-auth", "token")
	})
	t.Run("creds file", func(t *testing.T) {
		m := render(t, "nats.auth.secretName=nats-auth", "nats.auth.credsKey=flowstate.creds")
		wantMountedFile(t, m, "FLOWSTATE_NATS_CREDS", "nats-auth", "flowstate.creds")
	})
	t.Run("nkey", func(t *testing.T) {
		m := render(t, "nats.auth.secretName=nats-auth", "nats.auth.nkeyKey=seed.nk")
		wantMountedFile(t, m, "FLOWSTATE_NATS_NKEY", "nats-auth", "seed.nk")
	})
	t.Run("mutual TLS", func(t *testing.T) {
		m := render(t, "nats.tls.secretName=nats-client-tls", "nats.tls.certKey=tls.crt", "nats.tls.keyKey=tls.key")
		wantMountedFile(t, m, "FLOWSTATE_TLS_CA", "nats-client-tls", "ca.crt")
		wantMountedFile(t, m, "FLOWSTATE_TLS_CERT", "nats-client-tls", "tls.crt")
		wantMountedFile(t, m, "FLOWSTATE_TLS_KEY", "nats-client-tls", "tls.key")
	})
	t.Run("no Secret object and no plain secret", func(t *testing.T) {
		m := render(t, "nats.auth.secretName=nats-auth", "nats.auth.user=flowstate", "nats.auth.passwordKey=password",
			"worker.extraEnv.FLOWSTATE_LOG_LEVEL=debug")
		for _, k := range m.kinds {
			if k == "Secret" {
				t.Error("the chart renders a Secret: credentials belong in one the operator creates")
			}
		}
		for _, e := range m.worker(t).Env {
			if (strings.Contains(e.Name, "PASSWORD") || strings.Contains(e.Name, "TOKEN")) && (e.Value != "" || e.ValueFrom == nil) {
				t.Errorf("%s has a plain value in the pod spec", e.Name)
			}
		}
	})
	t.Run("refused in plain values", func(t *testing.T) {
		for _, set := range [][]string{
			{"worker.extraEnv.FLOWSTATE_NATS_PASSWORD=" + secretSentinel},
			{"worker.extraEnv.FLOWSTATE_NATS_TOKEN=" + secretSentinel},
			{"nats.auth.passwordKey=password", "nats.auth.user=u"}, // no secretName
		} {
			args := []string{"template", "fs", chartDir}
			for _, s := range set {
				args = append(args, "--set", s)
			}
			out, stderr, err := helm(t, args...)
			if err == nil {
				t.Errorf("%v rendered:\n%s", set, out)
			}
			if strings.Contains(out, secretSentinel) {
				t.Errorf("%v: the secret is in the output", set)
			}
			if !strings.Contains(stderr, "Secret") {
				t.Errorf("%v: the failure does not point to a Secret:\n%s", set, stderr)
			}
		}
	})
}

func wantSecretRef(t *testing.T, m manifests, name, secret, key string) {
	t.Helper()
	e := m.env(t, name)
	if e == nil {
		t.Fatalf("no %s", name)
	}
	if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Fatalf("%s is not from a secretKeyRef: %+v", name, *e)
	}
	if r := e.ValueFrom.SecretKeyRef; r.Name != secret || r.Key != key {
		t.Errorf("%s from secret %s key %s, want %s key %s", name, r.Name, r.Key, secret, key)
	}
}

// wantMountedFile checks that the variable names a file that a read-only
// mount of the Secret's key puts there.
func wantMountedFile(t *testing.T, m manifests, name, secret, key string) {
	t.Helper()
	path := m.envValue(t, name)
	c := m.worker(t)
	var vol string
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(path, vm.MountPath+"/") {
			if !vm.ReadOnly {
				t.Errorf("the mount %s is writable", vm.MountPath)
			}
			if rel := strings.TrimPrefix(path, vm.MountPath+"/"); rel != key {
				t.Errorf("%s=%s names %s in the mount, want %s", name, path, rel, key)
			}
			vol = vm.Name
		}
	}
	if vol == "" {
		t.Fatalf("%s=%s is under no mount", name, path)
	}
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		if v.Name != vol {
			continue
		}
		if v.Secret == nil || v.Secret.SecretName != secret {
			t.Fatalf("volume %s is not the Secret %s: %+v", vol, secret, v.VolumeSource)
		}
		if len(v.Secret.Items) == 0 {
			return // every key of the Secret
		}
		for _, it := range v.Secret.Items {
			if it.Key == key && it.Path == key {
				return
			}
		}
		t.Fatalf("volume %s does not project key %s", vol, key)
	}
	t.Fatalf("no volume %s", vol)
}

func TestMetricsServiceMonitorAndRules(t *testing.T) {
	m := render(t)
	if m.serviceMonitor != nil || m.prometheusRule != nil {
		t.Error("a ServiceMonitor or PrometheusRule by default: they need the prometheus-operator's CRDs")
	}
	if len(m.service.Spec.Ports) != 1 || m.service.Spec.Ports[0].Port != 9090 || m.service.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v", m.service.Spec.Ports)
	}
	if !reflect.DeepEqual(m.service.Spec.Selector, m.deployment.Spec.Selector.MatchLabels) {
		t.Errorf("the Service selects %v, the pods are %v", m.service.Spec.Selector, m.deployment.Spec.Selector.MatchLabels)
	}
	if got := m.envValue(t, "FLOWSTATE_METRICS_ADDR"); got != ":9090" {
		t.Errorf("FLOWSTATE_METRICS_ADDR %q, want :9090 (reachable by the kubelet's probes)", got)
	}

	m = render(t, "worker.kv=jetstream", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
	sm := m.serviceMonitor
	if sm == nil || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor %+v", sm)
	}
	if ep := sm.Spec.Endpoints[0]; ep.Port != "metrics" || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %+v", ep)
	}
	if !reflect.DeepEqual(sm.Spec.Selector.MatchLabels, m.service.Labels) && !subset(sm.Spec.Selector.MatchLabels, m.service.Labels) {
		t.Errorf("the ServiceMonitor selects %v, the Service has %v", sm.Spec.Selector.MatchLabels, m.service.Labels)
	}
	// The rules select job="flowstate".
	var job bool
	for _, r := range sm.Spec.Endpoints[0].Relabelings {
		job = job || (r.TargetLabel == "job" && r.Replacement == "flowstate")
	}
	if !job {
		t.Error("the scraped series are not labelled job=flowstate, which the alerting rules select")
	}

	if m.prometheusRule == nil {
		t.Fatal("no PrometheusRule")
	}
	src, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(src, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(m.prometheusRule.Spec.Groups, want.Groups) {
		t.Error("the PrometheusRule's groups are not those of deploy/prometheus/alerts.yml")
	}
}

func subset(sub, of map[string]string) bool {
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return len(sub) > 0
}

func TestWorkerSettingsBecomeItsVariables(t *testing.T) {
	m := render(t, "worker.kv=jetstream", "worker.prefix=greptime", "worker.kvBucket=greptime_state",
		"worker.publishInterval=100ms", "worker.maxNodes=20000", "worker.pprof=true",
		"worker.maxErrors=5000", "worker.maxErrorBytes=1048576",
		"worker.extraEnv.FLOWSTATE_LOG_LEVEL=debug", "nats.url=nats://a:4222\\,nats://b:4222")
	for name, want := range map[string]string{
		"FLOWSTATE_PREFIX":           "greptime",
		"FLOWSTATE_KV_BUCKET":        "greptime_state",
		"FLOWSTATE_PUBLISH_INTERVAL": "100ms",
		"FLOWSTATE_MAX_NODES":        "20000",
		"FLOWSTATE_MAX_ERRORS":       "5000",
		"FLOWSTATE_MAX_ERROR_BYTES":  "1048576",
		"FLOWSTATE_PPROF":            "true",
		"FLOWSTATE_LOG_LEVEL":        "debug",
		"FLOWSTATE_NATS_URL":         "nats://a:4222,nats://b:4222",
	} {
		if got := m.envValue(t, name); got != want {
			t.Errorf("%s %q, want %q", name, got, want)
		}
	}
	// A setting left empty keeps the worker's default: no variable.
	if e := m.env(t, "FLOWSTATE_QUEUE"); e != nil {
		t.Errorf("an empty setting rendered %+v", *e)
	}
}
