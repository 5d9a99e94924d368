//! A throwaway PostgreSQL for tests and benchmarks (feature `testing`).
//!
//! With `TINYAGENTS_PG_URL` set, [`TestCluster::start`] uses that server
//! (each [`TestCluster::database`] is a fresh database on it, dropped by
//! nobody: point it at a server meant for tests). Without it, it makes a
//! cluster of its own: `initdb` and `pg_ctl` from the machine's PostgreSQL
//! (`TINYAGENTS_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else
//! `PATH`), in a temporary directory, listening on a free loopback port,
//! run as the `postgres` user when the process is root (PostgreSQL refuses
//! to run as root). A watchdog shell, whose standard input is a pipe from
//! this process, stops the cluster and removes its directory when this
//! process exits however it exits, so a killed test leaves nothing running.
//!
//! What it is not: a way to run PostgreSQL in production.

use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a test cluster could not be started or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestClusterError {
    /// No PostgreSQL server binaries were found.
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) in {searched}: install Debian's \
         `postgresql` package (`cargo xtask peers` does), set TINYAGENTS_PG_BIN to their \
         directory, or set TINYAGENTS_PG_URL to a server"
    )]
    NoBinaries {
        /// Where they were looked for.
        searched: String,
    },
    /// A command of the cluster's failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command.
        command: String,
        /// What it printed, or why it did not start.
        detail: String,
    },
    /// The server did not answer.
    #[error("test database: {0}")]
    Connect(#[from] tokio_postgres::Error),
}

/// A PostgreSQL server for tests: one this process started, or the one
/// `TINYAGENTS_PG_URL` names.
pub struct TestCluster {
    /// Connection parameters without a database name (`host=… port=… user=…`).
    base: String,
    own: Option<OwnCluster>,
    next_database: AtomicU64,
}

/// A cluster this process made, and the watchdog that removes it.
struct OwnCluster {
    bin: PathBuf,
    data: PathBuf,
    /// Whether it offers TLS (its certificates beside the data).
    tls: bool,
    port: u16,
    run_as: Option<&'static str>,
    /// Closing it (this process exiting) makes the watchdog stop the
    /// cluster and remove its directory.
    watchdog_stdin: Option<ChildStdin>,
    watchdog: Child,
}

impl fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCluster")
            .field("base", &self.base)
            .field("own", &self.own.as_ref().map(|o| o.port))
            .finish()
    }
}

impl TestCluster {
    /// The server of `TINYAGENTS_PG_URL`, or a new cluster of this
    /// process's own.
    pub fn start() -> Result<Self, TestClusterError> {
        if let Some(url) = std::env::var("TINYAGENTS_PG_URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            return Ok(Self {
                base: url,
                own: None,
                next_database: AtomicU64::new(0),
            });
        }
        Self::own(false)
    }

    /// A cluster of this process's own that offers TLS (whatever
    /// `TINYAGENTS_PG_URL` says): a throwaway CA (made in this process)
    /// signs its certificate for `127.0.0.1`; [`ca_file`](Self::ca_file)
    /// is the CA's certificate, to trust it with.
    pub fn start_tls() -> Result<Self, TestClusterError> {
        Self::own(true)
    }

    /// The CA certificate (PEM) a [`start_tls`](Self::start_tls) cluster's
    /// certificate chains to.
    pub fn ca_file(&self) -> Option<PathBuf> {
        let own = self.own.as_ref()?;
        own.tls.then(|| own.dir().join("ca.crt"))
    }

    fn own(tls: bool) -> Result<Self, TestClusterError> {
        let own = OwnCluster::start(tls)?;
        Ok(Self {
            base: format!(
                "host=127.0.0.1 port={} user=tinyagents connect_timeout=10",
                own.port
            ),
            own: Some(own),
            next_database: AtomicU64::new(0),
        })
    }

    /// Connection parameters for the server's `postgres` database.
    pub fn admin_url(&self) -> String {
        with_dbname(&self.base, "postgres")
    }

    /// The port of a cluster this process started (`None` for
    /// `TINYAGENTS_PG_URL`).
    pub fn port(&self) -> Option<u16> {
        self.own.as_ref().map(|o| o.port)
    }

    /// Creates a fresh, empty database and returns its connection string.
    pub async fn database(&self) -> Result<String, TestClusterError> {
        let n = self.next_database.fetch_add(1, Ordering::Relaxed);
        let name = format!("tinyagents_test_{}_{n}", std::process::id());
        let (client, connection) =
            tokio_postgres::connect(&self.admin_url(), tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        // Two statements: neither may run inside a transaction block.
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .await?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        drop(client);
        let _ = driver.await;
        Ok(with_dbname(&self.base, &name))
    }

    /// Restarts the server (`pg_ctl restart -m fast`): every connection is
    /// dropped, committed data stays. Only for a cluster of this process.
    pub fn restart(&self) -> Result<(), TestClusterError> {
        let own = self.own.as_ref().ok_or_else(|| TestClusterError::Command {
            command: "restart".into(),
            detail: "TINYAGENTS_PG_URL names a server this process did not start".into(),
        })?;
        own.pg_ctl(&[
            "restart",
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "-o",
            &own.options(),
        ])
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // EOF on its stdin: the watchdog stops the cluster and removes it.
        drop(self.watchdog_stdin.take());
        let _ = self.watchdog.wait();
    }
}

impl OwnCluster {
    fn start(tls: bool) -> Result<Self, TestClusterError> {
        let bin = server_bin()?;
        let run_as = is_root().then_some("postgres");
        let dir = tempfile::Builder::new()
            .prefix("tinyagents-pg-")
            .tempdir()
            .map_err(|e| command_error("mkdtemp", e))?
            .keep();
        let data = dir.join("data");
        if tls {
            make_certificates(&dir)?;
        }
        if let Some(user) = run_as {
            chown_to(&dir, user)?;
        }
        let port = free_port()?;
        let mut cluster_cmd = runner(run_as, &bin.join("initdb"));
        cluster_cmd.args([
            "-A",
            "trust",
            "-U",
            "tinyagents",
            "-E",
            "UTF8",
            "--no-sync",
            "-D",
        ]);
        cluster_cmd.arg(&data);
        run_quietly(cluster_cmd, "initdb")?;
        // The watchdog: started before the server, so that a failing start
        // still removes the directory.
        let script = format!(
            "read _ignored; {stop} >/dev/null 2>&1; rm -rf '{dir}'",
            stop = shell_line(run_as, &bin.join("pg_ctl"), &data, "stop -m immediate -w"),
            dir = dir.display(),
        );
        let mut watchdog = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| command_error("sh (watchdog)", e))?;
        let watchdog_stdin = watchdog.stdin.take();
        let mut cluster = Self {
            bin,
            data,
            tls,
            port,
            run_as,
            watchdog_stdin,
            watchdog,
        };
        let log = dir.join("server.log");
        // The free port was free when it was picked: another process (a
        // test's cluster or client beside this one) may bind it before the
        // server does. Then it is started again on another port.
        let mut attempts = 0;
        loop {
            // A failed attempt's log says why; the next starts a new one.
            let _ = std::fs::remove_file(&log);
            let started = cluster.pg_ctl(&[
                "start",
                "-w",
                "-t",
                "60",
                "-l",
                &log.to_string_lossy(),
                "-o",
                &cluster.options(),
            ]);
            match started {
                Err(TestClusterError::Command { detail, .. })
                    if detail.contains("Address already in use") && attempts < 5 =>
                {
                    attempts += 1;
                    cluster.port = free_port()?;
                }
                other => return other.map(|()| cluster),
            }
        }
    }

    /// The server's options: loopback only, its socket in its own directory,
    /// durable commits (the figures measured against it are real).
    fn options(&self) -> String {
        let mut options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{}' \
             -c fsync=on -c synchronous_commit=on -c max_connections=200",
            self.port,
            self.data.display()
        );
        if self.tls {
            let dir = self.dir();
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file='{}' -c ssl_key_file='{}'",
                dir.join("server.crt").display(),
                dir.join("server.key").display()
            ));
        }
        options
    }

    /// The cluster's directory (the data, the logs, the certificates).
    fn dir(&self) -> &Path {
        self.data.parent().unwrap_or(&self.data)
    }

    /// Runs `pg_ctl`, its output to `pg_ctl.log` beside the data: the
    /// server it starts inherits pg_ctl's descriptors, so a pipe would stay
    /// open as long as the server runs.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), TestClusterError> {
        let dir = self.data.parent().unwrap_or(&self.data);
        let log_path = dir.join("pg_ctl.log");
        let log = std::fs::File::create(&log_path).map_err(|e| command_error("pg_ctl.log", e))?;
        let err_log = log
            .try_clone()
            .map_err(|e| command_error("pg_ctl.log", e))?;
        let mut cmd = runner(self.run_as, &self.bin.join("pg_ctl"));
        cmd.arg("-D").arg(&self.data).args(args);
        let status = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .status()
            .map_err(|e| command_error("pg_ctl", e))?;
        if status.success() {
            return Ok(());
        }
        let printed = std::fs::read_to_string(&log_path).unwrap_or_default();
        let server = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        Err(TestClusterError::Command {
            command: format!("pg_ctl {}", args.join(" ")),
            detail: format!(
                "{} ({status}); server log: {}",
                printed.trim(),
                server.trim()
            ),
        })
    }
}

/// `dsn` with `dbname=name` (a key/value string) or the path replaced (a URL).
fn with_dbname(dsn: &str, name: &str) -> String {
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let (head, query) = dsn
            .split_once('?')
            .map_or((dsn, None), |(h, q)| (h, Some(q)));
        let scheme_end = head.find("://").map_or(0, |i| i + 3);
        let authority_end = head[scheme_end..]
            .find('/')
            .map_or(head.len(), |i| scheme_end + i);
        let mut url = format!("{}/{name}", &head[..authority_end]);
        if let Some(query) = query {
            url.push('?');
            url.push_str(query);
        }
        url
    } else {
        format!("{dsn} dbname={name}")
    }
}

fn server_bin() -> Result<PathBuf, TestClusterError> {
    if let Some(bin) = std::env::var_os("TINYAGENTS_PG_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .find(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists())
        .ok_or_else(|| TestClusterError::NoBinaries {
            searched: "TINYAGENTS_PG_BIN, /usr/lib/postgresql/*/bin, PATH".into(),
        })
}

fn is_root() -> bool {
    // The effective uid of this process, from /proc (no libc call).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|uid| uid == "0")
        })
        .unwrap_or(false)
}

fn chown_to(dir: &Path, user: &str) -> Result<(), TestClusterError> {
    let mut cmd = Command::new("chown");
    cmd.arg("-R").arg(user).arg(dir);
    run_quietly(cmd, "chown")
}

/// A throwaway CA and a server certificate it signs for `127.0.0.1` and
/// `localhost`, in `dir`: `ca.crt`, `server.crt`, `server.key` (mode 0600,
/// as the server wants its key). Made in this process with rcgen (ECDSA
/// P-256 on ring), so the tests need no `openssl` program.
fn make_certificates(dir: &Path) -> Result<(), TestClusterError> {
    let (ca, server, key) = certificates().map_err(|e| TestClusterError::Command {
        command: "rcgen (the test CA)".to_owned(),
        detail: e.to_string(),
    })?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| command_error(name, e))
    };
    write("ca.crt", &ca)?;
    write("server.crt", &server)?;
    write("server.key", &key)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .map_err(|e| command_error("chmod server.key", e))?;
    }
    Ok(())
}

/// The CA's certificate, the server's certificate and the server's key,
/// in PEM.
fn certificates() -> Result<(String, String, String), rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "tinyagents-test-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let key = KeyPair::generate()?;
    let certificate = server.signed_by(&key, &ca)?;
    Ok((ca.pem(), certificate.pem(), key.serialize_pem()))
}

/// `program`, run as `user` (with runuser) when one is given.
fn runner(user: Option<&str>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", user, "--"]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

fn shell_line(user: Option<&str>, pg_ctl: &Path, data: &Path, args: &str) -> String {
    let program = format!("'{}' -D '{}' {args}", pg_ctl.display(), data.display());
    match user {
        Some(user) => format!("runuser -u {user} -- {program}"),
        None => program,
    }
}

fn free_port() -> Result<u16, TestClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| command_error("bind", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| command_error("bind", e))?
        .port();
    drop(listener);
    Ok(port)
}

fn run_quietly(mut cmd: Command, name: &str) -> Result<(), TestClusterError> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| command_error(name, e))?;
    if output.status.success() {
        return Ok(());
    }
    let mut detail = String::from_utf8_lossy(&output.stderr).into_owned();
    detail.push_str(&String::from_utf8_lossy(&output.stdout));
    Err(TestClusterError::Command {
        command: name.to_owned(),
        detail: format!("{} ({})", detail.trim(), output.status),
    })
}

fn command_error(name: &str, err: std::io::Error) -> TestClusterError {
    TestClusterError::Command {
        command: name.to_owned(),
        detail: err.to_string(),
    }
}
