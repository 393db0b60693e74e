//! The daemon's virtio-serial transport: a QEMU guest's port (`/dev/virtio-ports/NAME`)
//! whose only peer is the host, through a socket the host user owns. Each host connection
//! says hello on the port and is served until it goes; then the next hello is awaited.

use super::{Hello, Joining};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// Serves the host on `port` (on a thread of its own); broken hellos are reported on `notes`.
pub(crate) fn serve(port: &Path, joins: Sender<Joining>, notes: Sender<String>) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(port)?;
    let name = port.display().to_string();
    std::thread::spawn(move || {
        let mut input = BufReader::new(match f.try_clone() {
            Ok(r) => r,
            Err(e) => {
                notes.send(format!("{name}: {e}")).ok();
                return;
            }
        });
        loop {
            let mut line = String::new();
            match input.read_line(&mut line) {
                // No host connected: the port reads as closed until one is.
                Ok(0) => {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Err(e) => {
                    notes.send(format!("{name}: {e}")).ok();
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Ok(_) => {}
            }
            let hello: Hello = match serde_json::from_str(line.trim()) {
                Ok(h) => h,
                Err(e) => {
                    notes.send(format!("{name}: not a hello ({e})")).ok();
                    continue;
                }
            };
            let Ok(out) = f.try_clone() else { return };
            let peer = format!("the host on {name}");
            if joins.send(Joining { out: Box::new(out), hello, peer, uid: 0 }).is_err() {
                return;
            }
            // What the host sends after its hello is not read: drain it so the port never
            // fills, until the next hello (a new connection).
            let mut sink = [0u8; 512];
            while let Ok(n) = input.get_mut().read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
    });
    Ok(())
}
