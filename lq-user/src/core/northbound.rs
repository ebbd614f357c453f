//! The northbound's reading of the YANG state (issue 40; seed 003 sections 4.3 and 12.2):
//! data paths, the subtree a path selects from the RFC 7951 document that `lqd show
//! state` prints, and the read rules that decide what a client may see.
//!
//! Pure: the server (`daemon::gnmi`) converts the wire's `gnmi.Path` into [`DataPath`]
//! and hands over the client's certificate names; nothing here does I/O.
//!
//! Names are compared without their module prefix (`lq-weighted-ecmp:weighted-ecmp` and
//! `weighted-ecmp` are the same node): the document has one module's names and one
//! augment, and no two of its siblings share a local name.

use std::collections::BTreeMap;

use serde_json::Value;

/// The YANG module whose top container the data tree is.
pub const MODULE: &str = "ietf-lq-telemetry";
/// Its top container.
pub const TOP: &str = "lq-telemetry";

/// The subtrees of `/lq-telemetry` a client reads only when a rule grants them: seed 003
/// section 12.2 names `local` and `neighbors` ("they reveal where congestion hurts
/// most"), and lq's weighted-ECMP state (each destination's weights) says the same.
pub const SENSITIVE: [&str; 3] = ["local", "neighbors", "weighted-ecmp"];

/// One element of a data path: a node name and, for a list entry, its keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathElem {
    /// The node's name, without a module prefix.
    pub name: String,
    /// List keys by name; a value of `*` matches every entry.
    pub keys: BTreeMap<String, String>,
}

/// A path into the data tree, from its root (`[]` is the whole tree; the first element,
/// when there is one, is `lq-telemetry`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataPath {
    /// The elements, root first.
    pub elems: Vec<PathElem>,
}

/// A path that is not one of this data tree's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The origin or the first element names another module or container.
    #[error("{0:?} is not in this target's data tree (/{MODULE}:{TOP})")]
    OtherTree(String),
    /// Text that does not parse as a path.
    #[error("malformed path {path:?}: {why}")]
    Malformed {
        /// The text.
        path: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// A name without its `module:` prefix.
pub fn local_name(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, n)| n)
}

impl DataPath {
    /// From a gNMI path's origin and elements (prefix and path joined by the caller):
    /// the origin may be empty, `rfc7951`, or the module's name; the first element may
    /// carry the module prefix instead.
    pub fn from_elems(origin: &str, elems: Vec<PathElem>) -> Result<Self, PathError> {
        if !(origin.is_empty() || origin == MODULE || origin == "rfc7951") {
            return Err(PathError::OtherTree(origin.to_string()));
        }
        let mut elems: Vec<PathElem> = elems
            .into_iter()
            .map(|mut e| {
                // The top container carries its module, an augment's node too.
                e.name = local_name(&e.name).to_string();
                e
            })
            .collect();
        // `elem` entries left empty by some clients ("/" as one empty element).
        elems.retain(|e| !e.name.is_empty());
        // A node or key name is a YANG identifier: no path syntax inside one (an element
        // named "neighbors/neighbor" is not the path /neighbors/neighbor).
        let syntax = |s: &str| s.contains(['/', '[', ']', '=', ' ']);
        if elems
            .iter()
            .any(|e| syntax(&e.name) || e.keys.keys().any(|k| syntax(k) || k.is_empty()))
        {
            return Err(PathError::Malformed {
                path: elems
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                why: "a node or key name with path syntax in it",
            });
        }
        if let Some(first) = elems.first()
            && first.name != TOP
        {
            return Err(PathError::OtherTree(first.name.clone()));
        }
        Ok(Self { elems })
    }

    /// From text: `/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.1]`, with
    /// or without the module prefix on the first element (the form of `[[gnmi.client]]
    /// read`).
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let bad = |why| PathError::Malformed {
            path: text.to_string(),
            why,
        };
        let rest = text
            .strip_prefix('/')
            .ok_or_else(|| bad("must start with /"))?;
        let mut elems = Vec::new();
        if !rest.is_empty() {
            for part in split_outside_brackets(rest) {
                let (name, mut keys_text) = match part.find('[') {
                    Some(i) => (&part[..i], &part[i..]),
                    None => (part, ""),
                };
                if name.is_empty() {
                    return Err(bad("an empty element"));
                }
                let mut keys = BTreeMap::new();
                while !keys_text.is_empty() {
                    let end = keys_text.find(']').ok_or_else(|| bad("an unclosed ["))?;
                    let (k, v) = keys_text[1..end]
                        .split_once('=')
                        .ok_or_else(|| bad("a key without ="))?;
                    keys.insert(k.to_string(), v.to_string());
                    keys_text = &keys_text[end + 1..];
                    if !keys_text.is_empty() && !keys_text.starts_with('[') {
                        return Err(bad("text after a key"));
                    }
                }
                elems.push(PathElem {
                    name: name.to_string(),
                    keys,
                });
            }
        }
        Self::from_elems("", elems)
    }

    /// Whether `self` is `other` or one of its ancestors: an element without keys covers
    /// every entry of its list.
    pub fn covers(&self, other: &DataPath) -> bool {
        self.elems.len() <= other.elems.len()
            && self.elems.iter().zip(&other.elems).all(|(a, b)| {
                a.name == b.name
                    && a.keys
                        .iter()
                        .all(|(k, v)| v == "*" || b.keys.get(k) == Some(v))
            })
    }

    /// `/lq-telemetry/<name>`: a child of the top container.
    pub fn top_child(name: &str) -> DataPath {
        DataPath {
            elems: vec![
                PathElem {
                    name: TOP.into(),
                    keys: BTreeMap::new(),
                },
                PathElem {
                    name: name.into(),
                    keys: BTreeMap::new(),
                },
            ],
        }
    }
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.elems.is_empty() {
            return f.write_str("/");
        }
        for e in &self.elems {
            write!(f, "/{}", e.name)?;
            for (k, v) in &e.keys {
                write!(f, "[{k}={v}]")?;
            }
        }
        Ok(())
    }
}

/// `a/b[k=x/y]/c` split at the slashes outside brackets.
fn split_outside_brackets(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '/' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The value `path` selects in `doc` (the RFC 7951 document of `lqd show state`), in
/// RFC 7951 form: the document for the root, a container's members, a leaf's value, a
/// list entry (all keys given) or the matching entries of a list (an array). `None` when
/// nothing is there.
pub fn select(doc: &Value, path: &DataPath) -> Option<Value> {
    walk(doc, &path.elems)
}

fn walk(v: &Value, rest: &[PathElem]) -> Option<Value> {
    let Some((e, tail)) = rest.split_first() else {
        return Some(v.clone());
    };
    let next = member(v, &e.name)?;
    if e.keys.is_empty() {
        return walk(next, tail);
    }
    let matching = next.as_array()?.iter().filter(|entry| {
        e.keys.iter().all(|(k, want)| {
            want == "*" || member(entry, k).is_some_and(|x| scalar_text(x) == *want)
        })
    });
    if e.keys.values().any(|v| v == "*") {
        // Every matching entry's selection, in an array.
        Some(Value::Array(
            matching.filter_map(|m| walk(m, tail)).collect(),
        ))
    } else {
        match matching.collect::<Vec<_>>().as_slice() {
            [one] => walk(one, tail),
            _ => None,
        }
    }
}

/// A member of an object by local name (its key may carry a module prefix).
fn member<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_object()?
        .iter()
        .find(|(k, _)| local_name(k) == name)
        .map(|(_, v)| v)
}

/// A scalar's text as a key compares it (RFC 7951 writes 64-bit numbers as strings).
fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One client's read rule: the certificate names it applies to and the subtrees it grants
/// (`[[gnmi.client]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRule {
    /// A DNS name or IP address of the client's certificate (subjectAltName), or `*` for
    /// every client (plaintext ones included).
    pub name: String,
    /// The subtrees granted.
    pub read: Vec<DataPath>,
}

/// What a client may read of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Readable, with these subtrees removed from the answer (RFC 8341 section 3.4.5: a
    /// node the client may not read is left out of a read of its ancestor).
    Allowed {
        /// Subtrees to remove.
        prune: Vec<DataPath>,
    },
    /// Not readable: the request is refused with nothing of the data.
    Denied,
}

/// The grants of every rule that names the client (`matches` says whether a rule's name
/// is one of its certificate's) or `*`.
pub fn grants(rules: &[ReadRule], matches: impl Fn(&str) -> bool) -> Vec<&DataPath> {
    rules
        .iter()
        .filter(|r| r.name == "*" || matches(&r.name))
        .flat_map(|r| r.read.iter())
        .collect()
}

/// Whether a client with `grants` may read `path`: everything outside [`SENSITIVE`] is
/// readable by every authenticated client; a sensitive subtree, or a node inside it, only
/// when a grant covers it; a read of an ancestor of a sensitive subtree leaves out those
/// not granted.
pub fn access(grants: &[&DataPath], path: &DataPath) -> Access {
    let covered = |p: &DataPath| grants.iter().any(|g| g.covers(p));
    let mut prune = Vec::new();
    for s in SENSITIVE {
        let subtree = DataPath::top_child(s);
        if subtree.covers(path) {
            // Inside the subtree (or the subtree itself).
            return if covered(path) {
                Access::Allowed { prune: Vec::new() }
            } else {
                Access::Denied
            };
        }
        if path.covers(&subtree) && !covered(&subtree) {
            prune.push(subtree);
        }
    }
    Access::Allowed { prune }
}

/// Whether a client with `grants` may read the whole top-level subtree `name` (one of
/// [`SENSITIVE`], or any other child of the top container): what the metrics endpoint asks
/// of each family it renders.
pub fn readable_subtree(grants: &[&DataPath], name: &str) -> bool {
    matches!(
        access(grants, &DataPath::top_child(name)),
        Access::Allowed { .. }
    )
}

/// `doc` (the whole tree) without the `prune` subtrees: each is a child of the top
/// container ([`access`] prunes nothing deeper).
pub fn prune(doc: &mut Value, prune: &[DataPath]) {
    let Some(top) = doc
        .as_object_mut()
        .and_then(|o| o.iter_mut().find(|(k, _)| local_name(k) == TOP))
        .and_then(|(_, v)| v.as_object_mut())
    else {
        return;
    };
    for p in prune {
        if let [_, child] = p.elems.as_slice() {
            top.retain(|k, _| local_name(k) != child.name);
        }
    }
}

/// Removes the pruned subtrees from `value`, the selection of `path`: the subtrees are
/// relative to the root, so only a selection at the root or the top container has them.
pub fn prune_selection(value: &mut Value, path: &DataPath, pruned: &[DataPath]) {
    match path.elems.len() {
        0 => prune(value, pruned),
        1 => {
            if let Some(o) = value.as_object_mut() {
                for p in pruned {
                    if let [_, child] = p.elems.as_slice() {
                        o.retain(|k, _| local_name(k) != child.name);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({"ietf-lq-telemetry:lq-telemetry": {
            "enabled": true,
            "role": "load-balancer",
            "neighbors": {"neighbor": [
                {"node-as": 0, "node-id": "10.0.0.1", "state": "active"},
                {"node-as": 0, "node-id": "10.0.0.2", "state": "failed"}
            ]},
            "local": {"link-quality": []},
            "lq-weighted-ecmp:weighted-ecmp": {"group": [{"id": 7}]}
        }})
    }

    fn p(s: &str) -> DataPath {
        DataPath::parse(s).unwrap()
    }

    #[test]
    fn paths_parse_with_or_without_the_module_and_with_keys() {
        assert_eq!(
            p("/ietf-lq-telemetry:lq-telemetry/neighbors"),
            p("/lq-telemetry/neighbors")
        );
        let k = p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.1]/state");
        assert_eq!(k.elems[2].keys["node-id"], "10.0.0.1");
        assert_eq!(
            k.to_string(),
            "/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.1]/state"
        );
        assert_eq!(p("/").elems.len(), 0);
        assert!(DataPath::parse("/interfaces").is_err());
        assert!(DataPath::parse("lq-telemetry").is_err());
        assert!(DataPath::parse("/lq-telemetry/neighbors/neighbor[node-as=0").is_err());
        assert!(DataPath::from_elems("openconfig", vec![]).is_err());
        let elem = |n: &str| PathElem {
            name: n.into(),
            keys: BTreeMap::new(),
        };
        assert!(
            DataPath::from_elems("", vec![elem("lq-telemetry"), elem("neighbors/neighbor")])
                .is_err()
        );
        assert!(
            DataPath::from_elems("", vec![elem("lq-telemetry"), elem("neighbors[x=1]")]).is_err()
        );
    }

    #[test]
    fn selection_walks_containers_lists_and_keys() {
        let d = doc();
        assert_eq!(select(&d, &p("/")), Some(d.clone()));
        assert_eq!(
            select(&d, &p("/lq-telemetry/role")),
            Some(json!("load-balancer"))
        );
        let entry = p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.2]/state");
        assert_eq!(select(&d, &entry), Some(json!("failed")));
        let all = p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=*]");
        assert_eq!(select(&d, &all).unwrap().as_array().unwrap().len(), 2);
        assert_eq!(
            select(&d, &p("/lq-telemetry/weighted-ecmp/group[id=7]/id")),
            Some(json!(7))
        );
        assert_eq!(
            select(
                &d,
                &p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=9.9.9.9]")
            ),
            None
        );
        assert_eq!(select(&d, &p("/lq-telemetry/nothing")), None);
    }

    #[test]
    fn sensitive_subtrees_need_a_grant_and_are_left_out_of_their_ancestors() {
        let none: Vec<&DataPath> = Vec::new();
        assert_eq!(
            access(&none, &p("/lq-telemetry/role")),
            Access::Allowed { prune: vec![] }
        );
        assert_eq!(access(&none, &p("/lq-telemetry/neighbors")), Access::Denied);
        assert_eq!(
            access(
                &none,
                &p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.1]")
            ),
            Access::Denied
        );
        let Access::Allowed { prune: pr } = access(&none, &p("/")) else {
            panic!("the root is readable")
        };
        assert_eq!(pr.len(), 3);
        let mut d = doc();
        prune(&mut d, &pr);
        assert_eq!(
            d,
            json!({"ietf-lq-telemetry:lq-telemetry": {"enabled": true, "role": "load-balancer"}})
        );

        let g = p("/lq-telemetry/neighbors");
        let grants = vec![&g];
        assert_eq!(
            access(
                &grants,
                &p("/lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.1]")
            ),
            Access::Allowed { prune: vec![] }
        );
        let Access::Allowed { prune: pr } = access(&grants, &p("/lq-telemetry")) else {
            panic!()
        };
        assert_eq!(
            pr,
            vec![p("/lq-telemetry/local"), p("/lq-telemetry/weighted-ecmp")]
        );
        let mut top = select(&doc(), &p("/lq-telemetry")).unwrap();
        prune_selection(&mut top, &p("/lq-telemetry"), &pr);
        assert!(top.get("neighbors").is_some() && top.get("local").is_none());

        let root = p("/");
        let all = vec![&root];
        assert_eq!(
            access(&all, &p("/lq-telemetry/local")),
            Access::Allowed { prune: vec![] }
        );
    }

    #[test]
    fn rules_apply_by_name_or_to_everyone() {
        let rules = vec![
            ReadRule {
                name: "collector.example".into(),
                read: vec![p("/lq-telemetry/neighbors")],
            },
            ReadRule {
                name: "*".into(),
                read: vec![p("/lq-telemetry/weighted-ecmp")],
            },
        ];
        assert_eq!(grants(&rules, |n| n == "collector.example").len(), 2);
        assert_eq!(grants(&rules, |_| false).len(), 1);
    }
}
