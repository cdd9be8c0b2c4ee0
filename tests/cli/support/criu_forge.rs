//! What an attacker does with `crit` to a root dump's images: every
//! thread's core rewritten to run as another user, with no capability.
//! Root cannot dump another user's job on this project's machines (CRIU
//! needs CAP_SYS_RESOURCE to read its limits, which their bounding set
//! drops), so the tests that play a user bringing their own images forge
//! them from a root job's, as a user with `crit` would write them. CRIU's
//! images are protobuf messages in CRIU's framing; this edits the fields
//! it names and keeps every other byte.

use std::path::Path;

/// One field of a protobuf message: its number, and its wire type with the
/// payload as it was.
enum Value {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

struct Field {
    number: u64,
    value: Value,
}

fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
        shift += 7;
    }
}

fn write_varint(mut value: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn parse(message: &[u8]) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let key = read_varint(message, &mut at);
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Value::Varint(read_varint(message, &mut at)),
            1 => {
                let v = message[at..at + 8].try_into().expect("8 bytes");
                at += 8;
                Value::Fixed64(v)
            }
            2 => {
                let length = read_varint(message, &mut at) as usize;
                let v = message[at..at + length].to_vec();
                at += length;
                Value::Bytes(v)
            }
            5 => {
                let v = message[at..at + 4].try_into().expect("4 bytes");
                at += 4;
                Value::Fixed32(v)
            }
            other => panic!("wire type {other} in a CRIU image"),
        };
        fields.push(Field { number, value });
    }
    fields
}

fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for field in fields {
        let wire = match field.value {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Bytes(_) => 2,
            Value::Fixed32(_) => 5,
        };
        write_varint((field.number << 3) | wire, &mut out);
        match &field.value {
            Value::Varint(v) => write_varint(*v, &mut out),
            Value::Fixed64(v) => out.extend_from_slice(v),
            Value::Bytes(v) => {
                write_varint(v.len() as u64, &mut out);
                out.extend_from_slice(v);
            }
            Value::Fixed32(v) => out.extend_from_slice(v),
        }
    }
    out
}

/// `message` with `change` made to the fields of the message nested at
/// `path` (field numbers, outermost first).
fn edited(message: &[u8], path: &[u64], change: &dyn Fn(Vec<Field>) -> Vec<Field>) -> Vec<u8> {
    let fields = parse(message);
    let Some((first, rest)) = path.split_first() else {
        return encode(&change(fields));
    };
    let fields: Vec<Field> = fields
        .into_iter()
        .map(|field| match field.value {
            Value::Bytes(inner) if field.number == *first => Field {
                number: field.number,
                value: Value::Bytes(edited(&inner, rest, change)),
            },
            value => Field {
                number: field.number,
                value,
            },
        })
        .collect();
    encode(&fields)
}

/// An image (its two magic numbers, then entries of a length and a
/// message) with each message edited.
fn each_entry(image: &[u8], edit: &dyn Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = image[..8].to_vec();
    let mut at = 8;
    while at < image.len() {
        let length = u32::from_le_bytes(image[at..at + 4].try_into().expect("4 bytes")) as usize;
        let message = edit(&image[at + 4..at + 4 + length]);
        out.extend((message.len() as u32).to_le_bytes());
        out.extend(message);
        at += 4 + length;
    }
    out
}

/// A `core-TID.img` whose thread runs as `uid`:`gid`, in no other group,
/// with every capability set empty (`creds_entry`, in `thread_core`).
pub fn core_as_user(core_img: &[u8], uid: u32, gid: u32) -> Vec<u8> {
    each_entry(core_img, &|message| {
        edited(message, &[5, 10], &|fields| {
            fields
                .into_iter()
                .filter(|f| f.number != 14) // supplementary groups
                .map(|f| {
                    let value = match (f.number, f.value) {
                        (1 | 3 | 5 | 7, Value::Varint(_)) => Value::Varint(uid.into()),
                        (2 | 4 | 6 | 8, Value::Varint(_)) => Value::Varint(gid.into()),
                        // Permitted, effective, inheritable, ambient: none.
                        (9 | 10 | 11 | 19, Value::Varint(_)) => Value::Varint(0),
                        (_, value) => value,
                    };
                    Field {
                        number: f.number,
                        value,
                    }
                })
                .collect()
        })
    })
}

/// A copy of `from` (a root dump's images) at `to`, as a user would have
/// written it: every core run as `uid`, every file and the directory
/// theirs.
pub fn images_as_user(from: &Path, to: &Path, uid: u32) {
    use std::os::unix::fs::{chown, PermissionsExt};
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("the images").flatten() {
        let name = entry.file_name();
        let bytes = std::fs::read(entry.path()).expect("an image");
        let bytes = if name.to_string_lossy().starts_with("core-") {
            core_as_user(&bytes, uid, uid)
        } else {
            bytes
        };
        let copy = to.join(&name);
        std::fs::write(&copy, bytes).expect("write");
        chown(&copy, Some(uid), Some(uid)).expect("chown");
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    chown(to, Some(uid), Some(uid)).expect("chown");
}
