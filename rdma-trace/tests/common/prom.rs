//! A Prometheus in the lab guest, read over its HTTP API (no client library: one GET).

use std::collections::BTreeMap;
use std::time::Duration;

/// GET `path` from `addr` (HTTP/1.0): the status code and the body.
pub fn http_get(addr: &str, path: &str) -> Option<(u32, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// A PromQL instant query against the Prometheus on 127.0.0.1:9090: each series' labels
/// and value (None: no answer, or an error).
pub fn query(q: &str) -> Option<Vec<(BTreeMap<String, String>, f64)>> {
    let enc: String = q
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let (code, body) = http_get("127.0.0.1:9090", &format!("/api/v1/query?query={enc}"))?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"]
        .as_array()?
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()?
                .iter()
                .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect::<Option<BTreeMap<_, _>>>()?;
            Some((labels, s["value"][1].as_str()?.parse().ok()?))
        })
        .collect()
}

/// A query's single value (the first series').
pub fn query_one(q: &str) -> Option<f64> {
    query(q)?.first().map(|(_, v)| *v)
}

/// Starts `prometheus` with `config` on 127.0.0.1:9090 (data in /tmp/prom-data) and waits
/// until it is ready (slow to start under TCG: at most 3 minutes).
pub fn start(config: &std::path::Path, log: &std::path::Path) -> std::process::Child {
    std::fs::remove_dir_all("/tmp/prom-data").ok();
    let mut prom = std::process::Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .args(["--storage.tsdb.path=/tmp/prom-data", "--web.listen-address=127.0.0.1:9090"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("prometheus (a guest package)");
    let t0 = std::time::Instant::now();
    while http_get("127.0.0.1:9090", "/-/ready").map(|r| r.0) != Some(200) {
        if t0.elapsed() > Duration::from_secs(180) {
            prom.kill().ok();
            panic!("prometheus never became ready: {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    prom
}
