//! The processes of the integration tests: a real nats-server and the real
//! worker, started on free 127.0.0.1 ports and killed when dropped. The
//! binaries come from FLOWSTATE_WORKER_BIN and FLOWSTATE_NATS_SERVER_BIN
//! (the Makefile sets them); when unset, they are built once per test binary
//! with `go build` from the repository.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flowstate_client::{Client, Options, Report, StatsError, StatsView};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Bounds of starting a process and of waiting for a fact in a test.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Binaries {
    pub worker: PathBuf,
    pub nats_server: PathBuf,
}

/// Returns the binaries, building them with the go command when the
/// environment does not name them.
pub fn binaries() -> &'static Binaries {
    static BINS: OnceLock<Binaries> = OnceLock::new();
    BINS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bin");
        let worker = from_env_or_build("FLOWSTATE_WORKER_BIN", &dir.join("worker"), "./cmd/worker");
        let nats_server = from_env_or_build(
            "FLOWSTATE_NATS_SERVER_BIN",
            &dir.join("nats-server"),
            "github.com/nats-io/nats-server/v2",
        );
        Binaries {
            worker,
            nats_server,
        }
    })
}

fn from_env_or_build(var: &str, out: &Path, pkg: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "{var}={} is not a file: build it (`make build`) or unset {var}",
            p.display()
        );
        return p;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(out)
        .arg(pkg)
        .current_dir(&root)
        .status()
        .unwrap_or_else(|e| panic!("{var} is unset and `go build {pkg}` could not run ({e}): install Go, or set {var} to a built binary, e.g. {var}=bin/worker after `make build`"));
    assert!(
        status.success(),
        "go build {pkg} failed: set {var} to a built binary, or fix the build"
    );
    out.to_path_buf()
}

/// Returns a port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A unique name for the files of one process.
fn unique(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A nats-server process.
pub struct NatsServer {
    pub port: u16,
    pub url: String,
    child: Option<Child>,
    args: Vec<String>,
}

impl NatsServer {
    /// Starts nats-server with the given extra arguments.
    pub fn start(args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        for _ in 0..3 {
            let port = free_port();
            let mut s = NatsServer {
                port,
                url: format!("nats://127.0.0.1:{port}"),
                child: None,
                args: args.clone(),
            };
            if s.launch() {
                return s;
            }
        }
        panic!("nats-server did not start on a free port within 3 tries");
    }

    /// Starts nats-server whose max payload is max_payload bytes.
    pub fn with_max_payload(max_payload: usize) -> Self {
        let conf = unique("nats").with_extension("conf");
        std::fs::write(&conf, format!("max_payload: {max_payload}\n")).unwrap();
        Self::start(&["-c", conf.to_str().unwrap()])
    }

    /// Starts nats-server with JetStream, its store in a fresh directory.
    pub fn with_jetstream() -> Self {
        let dir = unique("js");
        Self::start(&["-js", "-sd", dir.to_str().unwrap()])
    }

    fn launch(&mut self) -> bool {
        let child = Command::new(&binaries().nats_server)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            if let Ok(Some(_)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                return false; // the port was taken
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Kills the server and starts it again on the same port with args.
    pub fn restart_with(&mut self, args: &[&str]) {
        self.kill();
        self.args = args.iter().map(|s| s.to_string()).collect();
        for _ in 0..50 {
            if self.launch() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("nats-server did not restart on port {}", self.port);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A worker process.
pub struct Worker {
    pub prefix: String,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Worker {
    /// Starts the worker on server url with prefix and extra flags, and
    /// waits until it answers a get.
    pub async fn start(url: &str, prefix: &str, args: &[&str]) -> Self {
        let log = unique("worker").with_extension("log");
        let child = Command::new(&binaries().worker)
            .args(["--nats-url", url, "--prefix", prefix])
            .args(args)
            .env_remove("FLOWSTATE_NATS_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn the worker");
        let w = Worker {
            prefix: prefix.to_string(),
            log,
            child: Some(child),
        };
        let c = client(url, prefix).await;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match c.get().await {
                Ok(_) => return w,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "worker not ready within {START_TIMEOUT:?}: {e}; log: {}",
                    w.log_text()
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Connects a client of prefix to url, with reconnects forever (the tests
/// restart servers) and a short reconnect wait.
pub async fn client(url: &str, prefix: &str) -> Client {
    client_with(
        url,
        Options {
            prefix: prefix.into(),
            ..Options::default()
        },
    )
    .await
}

pub async fn client_with(url: &str, options: Options) -> Client {
    let nats = async_nats::ConnectOptions::new()
        .max_reconnects(None)
        .reconnect_delay_callback(|_| Duration::from_millis(50))
        .connect(url)
        .await
        .expect("connect to nats-server");
    Client::new(nats, options).unwrap()
}

/// Runs f until it returns Some, at most WAIT_TIMEOUT.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {WAIT_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stats view of reports of disjoint flows: each flow in one report,
/// its errors with the report's node.
pub fn view_of(reports: &[Report]) -> StatsView {
    let mut want = StatsView::default();
    for r in reports {
        want.state_size.extend(r.value.state_size.clone());
        want.last_exec_time_map
            .extend(r.value.last_exec_time_map.clone());
        want.start_time_map.extend(r.value.start_time_map.clone());
        want.processed_rows
            .extend(r.processed_rows.clone().unwrap_or_default());
        for (id, errs) in r.last_errors.clone().unwrap_or_default() {
            if errs.is_empty() {
                continue; // a flow without errors is not in the view's map
            }
            let errs = errs
                .into_iter()
                .map(|e| StatsError {
                    time: e.time,
                    node_id: r.node_id,
                    message: e.message,
                })
                .collect();
            want.last_errors.insert(id, errs);
        }
    }
    want
}

/// A connection speaking the NATS protocol by hand, to publish headers no
/// client library would write.
pub struct RawPeer {
    pub rd: BufReader<tokio::net::tcp::OwnedReadHalf>,
    pub wr: tokio::net::tcp::OwnedWriteHalf,
}

impl RawPeer {
    pub async fn connect(port: u16) -> Self {
        let (rd, wr) = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap()
            .into_split();
        let mut p = RawPeer {
            rd: BufReader::new(rd),
            wr,
        };
        let mut info = String::new();
        p.rd.read_line(&mut info).await.unwrap();
        assert!(info.starts_with("INFO "), "{info}");
        p.wr.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n")
            .await
            .unwrap();
        p.ping().await;
        p
    }

    /// Sends PING and waits for PONG: the server took what came before.
    pub async fn ping(&mut self) {
        self.wr.write_all(b"PING\r\n").await.unwrap();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(WAIT_TIMEOUT, self.rd.read_line(&mut line))
                .await
                .expect("PONG in time")
                .unwrap();
            assert!(n > 0, "the server closed the raw connection");
            assert!(!line.starts_with("-ERR"), "the server refused: {line}");
            if line.starts_with("PONG") {
                return;
            }
        }
    }

    /// Publishes header bytes hdr and payload on subject as they are.
    pub async fn hpub(&mut self, subject: &str, hdr: &[u8], payload: &[u8]) {
        let mut m = format!(
            "HPUB {subject} {} {}\r\n",
            hdr.len(),
            hdr.len() + payload.len()
        )
        .into_bytes();
        m.extend_from_slice(hdr);
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\n");
        self.wr.write_all(&m).await.unwrap();
        self.ping().await;
    }

    /// Publishes as hpub does, without waiting for the server to take it.
    pub async fn hpub_nowait(&mut self, subject: &str, hdr: &[u8], payload: &[u8]) {
        let head = format!(
            "HPUB {subject} {} {}\r\n",
            hdr.len(),
            hdr.len() + payload.len()
        );
        self.wr.write_all(head.as_bytes()).await.unwrap();
        self.wr.write_all(hdr).await.unwrap();
        self.wr.write_all(payload).await.unwrap();
        self.wr.write_all(b"\r\n").await.unwrap();
    }
}
