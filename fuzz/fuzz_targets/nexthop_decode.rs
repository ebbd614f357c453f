//! The rtnetlink nexthop decoder never panics on what a socket returns; a decoded message
//! re-encodes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lq_user::controller::nexthop;

fuzz_target!(|data: &[u8]| {
    for m in nexthop::parse_messages(data) {
        if let Ok(nexthop::NetlinkMessage::NewNexthop(_, msg)) = m {
            let _ = nexthop::encode_new(&msg, 1);
        }
    }
    if let Ok(msg) = nexthop::decode_nexthop(data) {
        let _ = nexthop::encode_new(&msg, 1);
    }
});
