//! Child-process plumbing: line protocol on stdin/stdout, and the parent's
//! handle on a child.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The next line of stdin without its newline; `None` at EOF.
fn next_line() -> Option<std::io::Result<String>> {
    let mut l = String::new();
    match std::io::stdin().read_line(&mut l) {
        Ok(0) => None,
        Ok(_) => Some(Ok(l.trim_end().to_string())),
        Err(e) => Some(Err(e)),
    }
}

/// Prints one protocol line to the parent.
pub fn emit(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// Reads the next line from the parent; it must start with `word`.
pub fn expect(word: &str) -> Result<String> {
    let l = next_line()
        .with_context(|| format!("parent closed stdin before {word:?}"))?
        .context("reading stdin")?;
    if l.split_whitespace().next() != Some(word) {
        bail!("expected {word:?} from the parent, got {l:?}");
    }
    Ok(l)
}

/// A flag set when the parent writes `stop` or closes stdin.
pub fn stop_flag() -> Arc<AtomicBool> {
    let f = Arc::new(AtomicBool::new(false));
    let g = f.clone();
    std::thread::spawn(move || {
        loop {
            match next_line() {
                Some(Ok(l)) if l.trim() != "stop" => continue,
                _ => break,
            }
        }
        g.store(true, Ordering::Relaxed);
    });
    f
}

/// The parent's side of a child process speaking the line protocol.
pub struct Peer {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
    name: String,
}

impl Peer {
    /// Starts `program args…` with piped stdin/stdout (stderr inherited).
    pub fn spawn(name: &str, program: &std::path::Path, args: &[String]) -> Result<Peer> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("{name}: cannot start {}", program.display()))?;
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().context("piped stdout")?);
        Ok(Peer {
            child,
            input,
            output,
            name: name.to_string(),
        })
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let i = self.input.as_mut().context("stdin closed")?;
        writeln!(i, "{line}")
            .and_then(|_| i.flush())
            .with_context(|| format!("{}: writing to its stdin", self.name))
    }

    /// Reads lines until one starts with `word`; returns the words after it.
    pub fn expect(&mut self, word: &str) -> Result<Vec<String>> {
        let mut l = String::new();
        loop {
            l.clear();
            let n = self
                .output
                .read_line(&mut l)
                .with_context(|| format!("{}: reading its stdout", self.name))?;
            if n == 0 {
                let st = self.child.wait().context("waiting for a child")?;
                bail!("{} exited ({st}) before {word:?}", self.name);
            }
            let mut w = l.split_whitespace();
            if w.next() == Some(word) {
                return Ok(w.map(str::to_string).collect());
            }
        }
    }

    /// Closes stdin (a server then stops) and waits for the exit.
    pub fn finish(mut self) -> Result<()> {
        let _ = self.send("stop");
        self.input = None;
        let st = self.child.wait().context("waiting for a child")?;
        if !st.success() {
            bail!("{} failed ({st})", self.name);
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.input = None;
        if let Ok(None) = self.child.try_wait() {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
            let _ = self.child.wait();
        }
    }
}

/// Runs one measurement between a server side already started and a client
/// side `client` starts once the server announced itself: each learns the
/// other's `info`, both say `ready`, the client is told `go`; returns the
/// words of the client's `result` line after both ended well.
pub fn measure(mut server: Peer, client: impl FnOnce() -> Result<Peer>) -> Result<Vec<String>> {
    let si = server.expect("info")?;
    let mut c = client()?;
    let ci = c.expect("info")?;
    server.send(&format!("peer {}", ci.join(" ")))?;
    c.send(&format!("peer {}", si.join(" ")))?;
    server.expect("ready")?;
    c.expect("ready")?;
    c.send("go")?;
    let r = c.expect("result")?;
    c.finish()?;
    server.finish()?;
    Ok(r)
}
