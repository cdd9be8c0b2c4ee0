//! What CRIU's half of the plugin and its helper say to each other: one
//! line a message over a socket pair (pure encoding, and the line reader).
//!
//! CRIU's half sends a [`Request`]; the helper answers with [`Ask`]s for
//! what only CRIU's process may do, each answered with a [`Reply`], and
//! ends with [`Ask::Answer`], the hook's result for CRIU.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;

/// CRIU's hooks the helper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    PauseDevices,
    CheckpointDevices,
    ResumeDevicesLate,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::PauseDevices => "PAUSE_DEVICES",
            Hook::CheckpointDevices => "CHECKPOINT_DEVICES",
            Hook::ResumeDevicesLate => "RESUME_DEVICES_LATE",
        }
    }
}

/// CRIU's half to the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A hook for one process of the tree.
    Hook { hook: Hook, pid: i32 },
    /// CRIU's `fini` with its result: the helper's last request.
    Fini { ret: i32 },
}

/// The helper to CRIU's half.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Mark the images as needing this plugin to restore.
    AddToInventory,
    /// Let these restore threads run (CRIU has them stopped).
    LetRun(Vec<i32>),
    /// Stop again the threads let run.
    StopAgain,
    /// The request is done: CRIU's return code for the hook.
    Answer(i32),
}

/// CRIU's half's answer to an [`Ask`] other than `Answer`.
pub type Reply = Result<(), String>;

impl Request {
    pub fn encode(&self) -> String {
        match self {
            Request::Hook { hook, pid } => format!("hook {} {pid}", hook.name()),
            Request::Fini { ret } => format!("fini {ret}"),
        }
    }

    pub fn decode(line: &str) -> Result<Request, String> {
        let words: Vec<&str> = line.split(' ').collect();
        let number = |word: &str| word.parse::<i32>().map_err(|_| unknown(line));
        match words.as_slice() {
            ["hook", name, pid] => {
                let hook = [
                    Hook::PauseDevices,
                    Hook::CheckpointDevices,
                    Hook::ResumeDevicesLate,
                ]
                .into_iter()
                .find(|hook| hook.name() == *name)
                .ok_or_else(|| unknown(line))?;
                Ok(Request::Hook {
                    hook,
                    pid: number(pid)?,
                })
            }
            ["fini", ret] => Ok(Request::Fini { ret: number(ret)? }),
            _ => Err(unknown(line)),
        }
    }
}

impl Ask {
    pub fn encode(&self) -> String {
        match self {
            Ask::AddToInventory => "add-to-inventory".to_string(),
            Ask::LetRun(tids) => {
                let tids: Vec<String> = tids.iter().map(i32::to_string).collect();
                format!("let-run {}", tids.join(" ")).trim_end().to_string()
            }
            Ask::StopAgain => "stop-again".to_string(),
            Ask::Answer(code) => format!("answer {code}"),
        }
    }

    pub fn decode(line: &str) -> Result<Ask, String> {
        let mut words = line.split(' ');
        let numbers = |words: std::str::Split<'_, char>| {
            words
                .map(|word| word.parse::<i32>().map_err(|_| unknown(line)))
                .collect::<Result<Vec<i32>, String>>()
        };
        match words.next() {
            Some("add-to-inventory") if line == "add-to-inventory" => Ok(Ask::AddToInventory),
            Some("let-run") => Ok(Ask::LetRun(numbers(words)?)),
            Some("stop-again") if line == "stop-again" => Ok(Ask::StopAgain),
            Some("answer") => match numbers(words)?.as_slice() {
                [code] => Ok(Ask::Answer(*code)),
                _ => Err(unknown(line)),
            },
            _ => Err(unknown(line)),
        }
    }
}

pub fn encode_reply(reply: &Reply) -> String {
    match reply {
        Ok(()) => "ok".to_string(),
        // One line: a reason never carries the line's end.
        Err(why) => format!("error {}", why.replace(['\n', '\r'], " ")),
    }
}

pub fn decode_reply(line: &str) -> Result<Reply, String> {
    if line == "ok" {
        Ok(Ok(()))
    } else if let Some(why) = line.strip_prefix("error ") {
        Ok(Err(why.to_string()))
    } else {
        Err(unknown(line))
    }
}

fn unknown(line: &str) -> String {
    format!("an unknown message between the plugin's halves: {line:?}")
}

/// One end of the socket pair, a line at a time.
pub struct Link {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// The longest line either half sends (a list of thread IDs is the
/// longest): a longer one is a fault, not a message.
const LINE_CAP: u64 = 1 << 20;

impl Link {
    pub fn new(stream: UnixStream) -> std::io::Result<Link> {
        Ok(Link {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    pub fn send(&mut self, line: &str) -> Result<(), String> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("the other half of the plugin is gone ({e})"))
    }

    /// The next line, or why there is none (the other half ended).
    pub fn receive(&mut self) -> Result<String, String> {
        let mut line = String::new();
        let read = Read::by_ref(&mut self.reader)
            .take(LINE_CAP)
            .read_line(&mut line)
            .map_err(|e| format!("the other half of the plugin is gone ({e})"))?;
        if read == 0 || !line.ends_with('\n') {
            return Err("the other half of the plugin ended".to_string());
        }
        line.pop();
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        for request in [
            Request::Hook {
                hook: Hook::PauseDevices,
                pid: 42,
            },
            Request::Hook {
                hook: Hook::CheckpointDevices,
                pid: 1,
            },
            Request::Hook {
                hook: Hook::ResumeDevicesLate,
                pid: 7,
            },
            Request::Fini { ret: -1 },
        ] {
            assert_eq!(Request::decode(&request.encode()), Ok(request));
        }
        for ask in [
            Ask::AddToInventory,
            Ask::LetRun(vec![3, 4]),
            Ask::LetRun(vec![]),
            Ask::StopAgain,
            Ask::Answer(-95),
        ] {
            assert_eq!(Ask::decode(&ask.encode()), Ok(ask));
        }
        for reply in [Ok(()), Err("no such process".to_string())] {
            assert_eq!(decode_reply(&encode_reply(&reply)), Ok(reply));
        }
    }

    #[test]
    fn a_reason_stays_on_its_line() {
        let reply = Err("one\nanswer 0".to_string());
        assert_eq!(encode_reply(&reply), "error one answer 0");
    }

    #[test]
    fn anything_else_is_refused() {
        for line in [
            "",
            "hook PAUSE 1",
            "hook PAUSE_DEVICES x",
            "fini",
            "answer",
            "answer 1 2",
            "let-run a",
            "stop-again now",
            "okay",
        ] {
            assert!(Request::decode(line).is_err(), "{line}");
            assert!(Ask::decode(line).is_err(), "{line}");
        }
        assert!(Request::decode("answer 0").is_err());
        assert!(decode_reply("okay").is_err());
    }

    #[test]
    fn lines_cross_a_socket_pair_and_its_end_is_seen() {
        let (a, b) = UnixStream::pair().expect("a pair");
        let (mut a, mut b) = (Link::new(a).expect("link"), Link::new(b).expect("link"));
        a.send("hook PAUSE_DEVICES 5").expect("sends");
        assert_eq!(b.receive().as_deref(), Ok("hook PAUSE_DEVICES 5"));
        drop(a);
        assert!(b.receive().is_err());
    }
}
