//! What a job's wrapper (`cudackpt slurm run`) and its node's service
//! (`cudackpt slurm serve`) say to each other on the service's Unix
//! socket: one JSON object a line, the wrapper asking, the service
//! answering each ask once and, unasked, when a job it restored ends.

use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

/// What the wrapper asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "snake_case")]
pub enum Ask {
    /// Bring the job back from its last complete snapshot (a restart).
    Restore,
    /// Drain the job and write it to disk (a preemption).
    Dump,
    /// Send `signal` to the job the service restored.
    Signal { signal: i32 },
    /// The job's command ended with `code`: a job that succeeded needs its
    /// images no more.
    Finished { code: i32 },
}

/// What the service says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "said", rename_all = "snake_case")]
pub enum Reply {
    /// Who the service takes the asker for: the first line.
    Hello {
        job: u64,
        node: String,
        uid: u32,
        restarts: u32,
    },
    /// The asker is no job's wrapper, or asked what it may not: the last
    /// line.
    Refused { why: String },
    /// The job is back from the snapshot in `from`, written on
    /// `written_on` at `written_unix_s`, in `took_ms`; `root` is its first
    /// process.
    Restored {
        from: String,
        written_on: String,
        written_unix_s: u64,
        took_ms: f64,
        root: i32,
        /// Where its GPUs went (`OLD=NEW,...` by UUID), when Slurm named
        /// the job's GPUs.
        #[serde(default)]
        gpus: Option<String>,
    },
    /// The job was not brought back: it starts over.
    NotRestored { why: String },
    /// The job is on disk in `to`, `bytes` of images, in `took_ms`.
    Dumped {
        to: String,
        bytes: u64,
        took_ms: f64,
    },
    /// The job was not written to disk, and runs on.
    NotDumped { why: String },
    /// The signal was sent.
    Signalled,
    /// The job's end is noted (its images removed where it succeeded).
    Noted,
    /// The job the service restored ended, with `code` as a shell gives
    /// it (128 + N for signal N).
    Exited { code: i32 },
}

/// The longest line either side reads: a line this long is no message of
/// theirs.
pub const LINE_CAP: u64 = 64 << 10;

/// Writes `message` as one line.
pub fn send<T: Serialize>(to: &mut impl Write, message: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
    line.push(b'\n');
    to.write_all(&line)?;
    to.flush()
}

/// Reads the next message; `Ok(None)` at the end of the stream.
pub fn receive<T: for<'de> Deserialize<'de>>(from: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    Read::take(&mut *from, LINE_CAP).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of more than {LINE_CAP} bytes, or cut short"),
        ));
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_each_and_read_back() {
        let mut wire = Vec::new();
        send(&mut wire, &Ask::Signal { signal: 15 }).expect("send");
        send(&mut wire, &Ask::Restore).expect("send");
        assert_eq!(
            String::from_utf8_lossy(&wire),
            "{\"ask\":\"signal\",\"signal\":15}\n{\"ask\":\"restore\"}\n"
        );
        let mut reader = io::BufReader::new(wire.as_slice());
        assert_eq!(
            receive::<Ask>(&mut reader).expect("read"),
            Some(Ask::Signal { signal: 15 })
        );
        assert_eq!(
            receive::<Ask>(&mut reader).expect("read"),
            Some(Ask::Restore)
        );
        assert_eq!(receive::<Ask>(&mut reader).expect("read"), None);
    }

    #[test]
    fn a_line_cut_short_or_too_long_or_not_a_message_is_refused() {
        for wire in [
            b"{\"ask\":\"restore\"}".to_vec(),
            b"{\"ask\":\"format_disk\"}\n".to_vec(),
            vec![b' '; LINE_CAP as usize + 10],
        ] {
            let mut reader = io::BufReader::new(wire.as_slice());
            assert!(receive::<Ask>(&mut reader).is_err());
        }
    }
}
