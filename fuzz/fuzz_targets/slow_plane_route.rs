//! The slow plane's rtnetlink route decoder never panics on what a socket returns, and the
//! core digests whatever it decodes (seed 003 section 4.1).
#![no_main]
use libfuzzer_sys::fuzz_target;
use lq_user::slow_plane::{
    RouteEvent, Settings, SlowPlane,
    route_msg::{self, Message},
};

fuzz_target!(|data: &[u8]| {
    let mut core = SlowPlane::new(Settings {
        protocols: [186].into(),
        source_table: 254,
        lq_table: 76,
        uplinks: Vec::new(),
        rules: Vec::new(),
    });
    for m in route_msg::parse(data) {
        match m {
            Ok(Message::NewRoute(r)) => core.apply(RouteEvent::NewRoute(r)),
            Ok(Message::DelRoute(r)) => core.apply(RouteEvent::DelRoute(r)),
            Ok(Message::NewNexthop(n)) => core.apply(RouteEvent::NewNexthop(n)),
            _ => {}
        }
    }
    let _ = core.eligible();
    let _ = route_msg::decode_route(data);
});
