//! The daemon's HTTP listener (`daemon --metrics ADDR`): the Prometheus exposition
//! `output::metrics` renders, and `/clock` for a peer's `--clock-peer`. Bounded as the
//! socket is: requests in bytes and time, connections in flight.

/// Request bytes read at most (the request line and headers), the time a client has to
/// send them, and the requests answered at once (past that, 503 at once).
pub(crate) const MAX_REQUEST: u64 = 16 << 10;
const REQUEST_TIME: std::time::Duration = std::time::Duration::from_secs(2);
/// The requests answered at once (past that, 503 at once).
pub const MAX_IN_FLIGHT: usize = 64;

/// Serves `text()` over HTTP on `addr` (any path, GET; `/clock` answers the wall clock for a
/// peer's `--clock-peer`, `clock`): a thread per connection (at most
/// `MAX_IN_FLIGHT`), the current exposition each time. A client that sends more than
/// `MAX_REQUEST` bytes or takes longer than 2 s is answered as it stands, then closed.
pub fn serve(
    addr: &str,
    text: std::sync::Arc<std::sync::Mutex<String>>,
) -> std::io::Result<std::net::SocketAddr> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let in_flight = std::sync::Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                let busy =
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                std::io::Write::write_all(&mut &conn, busy.as_bytes()).ok();
                continue;
            }
            let (text, in_flight) = (text.clone(), in_flight.clone());
            std::thread::spawn(move || {
                answer(&conn, &text);
                in_flight.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    Ok(bound)
}

/// Reads the request (bounded in bytes and time) and writes the exposition.
fn answer(conn: &std::net::TcpStream, text: &std::sync::Mutex<String>) {
    use std::io::{BufRead, BufReader, Read};
    let deadline = std::time::Instant::now() + REQUEST_TIME;
    let mut r = BufReader::new(conn.take(MAX_REQUEST));
    let mut line = String::new();
    let mut first = String::new();
    // The request line and headers, up to the blank line.
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            break;
        }
        line.clear();
        if !r.read_line(&mut line).is_ok_and(|n| n > 0) || line == "\r\n" || line == "\n" {
            break;
        }
        if first.is_empty() {
            first = line.clone();
        }
    }
    let (body, kind) = if first.split_whitespace().nth(1) == Some(crate::clock::PATH) {
        (crate::clock::answer(), "application/json")
    } else {
        (text.lock().map(|t| t.clone()).unwrap_or_default(), "text/plain; version=0.0.4")
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut w = conn;
    std::io::Write::write_all(&mut w, head.as_bytes()).ok();
    std::io::Write::write_all(&mut w, body.as_bytes()).ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slow clients and endless headers hold a thread for at most 2 s and 16 KiB each; a
    /// scrape among them is answered at once.
    #[test]
    fn slow_and_endless_requests_cost_bounded_time_and_the_scrape_still_answers() {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        let text = std::sync::Arc::new(std::sync::Mutex::new("rdma_trace_up 1\n".to_string()));
        let addr = serve("127.0.0.1:0", text).unwrap();
        let slow: Vec<TcpStream> = (0..16)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
                s
            })
            .collect();
        let mut endless = TcpStream::connect(addr).unwrap();
        let junk = vec![b'a'; 64 << 10];
        let mut sent = 0usize;
        while sent < 8 << 20 && endless.write_all(&junk).is_ok() {
            sent += junk.len();
            endless.set_write_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
        }
        assert!(sent < 8 << 20, "the endless request was read to {sent} bytes");
        let t = std::time::Instant::now();
        let mut scrape = TcpStream::connect(addr).unwrap();
        scrape.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = String::new();
        scrape.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("rdma_trace_up 1\n"), "{got}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "the scrape waited {:?}", t.elapsed());
        for mut s in slow {
            let t = std::time::Instant::now();
            let mut got = String::new();
            s.read_to_string(&mut got).ok();
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            assert!(t.elapsed() < std::time::Duration::from_secs(3), "held {:?}", t.elapsed());
        }
    }
}
