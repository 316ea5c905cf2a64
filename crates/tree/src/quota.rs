//! ZooKeeper's quota bookkeeping: a subtree P with a node
//! /zookeeper/quota{P}/zookeeper_limits has its node count and data bytes
//! kept in /zookeeper/quota{P}/zookeeper_stats ("count=N,bytes=M"), which
//! `listquota` reads. Like ZooKeeper (DataTree.updateQuotaStat), only the
//! stats node's data changes, never its version or mzxid; the deepest
//! quota root containing a path is the one charged.

use crate::tree::DataTree;

pub(crate) const QUOTA_ROOT: &str = "/zookeeper/quota";
const LIMIT_NODE: &str = "zookeeper_limits";
const STAT_NODE: &str = "zookeeper_stats";

impl DataTree {
    /// The deepest quota root containing `path` (never "/"), if any.
    pub(crate) fn quota_prefix(&self, path: &str) -> Option<String> {
        // A snapshot without the system nodes (not one Keel writes) leaves
        // no kept id: then the path is resolved, as before there was one.
        debug_assert!(self
            .quota_root
            .is_none_or(|id| Some(id) == self.resolve(QUOTA_ROOT)));
        let quota_root = self.quota_root.or_else(|| self.resolve(QUOTA_ROOT));
        if quota_root.is_none_or(|id| self.slot(id).is_leaf()) {
            return None;
        }
        let mut prefix = String::new();
        let mut deepest = None;
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            prefix.push('/');
            prefix.push_str(segment);
            if self
                .resolve(&format!("{QUOTA_ROOT}{prefix}/{LIMIT_NODE}"))
                .is_some()
            {
                deepest = Some(prefix.clone());
            }
        }
        deepest
    }

    /// After a node at `path` was created (count +1) or deleted (−1) or its
    /// data changed: charge its quota root.
    pub(crate) fn charge_quota(&mut self, path: &str, bytes_diff: i64, count_diff: i64) {
        if let Some(prefix) = self.quota_prefix(path) {
            // Java long arithmetic, as ZooKeeper's: a client may write any
            // count into the stats node, so the sum can overflow.
            self.update_stats(&prefix, |count, bytes| {
                (
                    count.wrapping_add(count_diff),
                    bytes.wrapping_add(bytes_diff),
                )
            });
        }
    }

    /// Creating a stats node (setquota) recounts its subtree, as ZooKeeper's
    /// updateQuotaForPath does.
    pub(crate) fn quota_node_created(&mut self, parent: &str, name: &str) {
        if name != STAT_NODE || !parent.starts_with(QUOTA_ROOT) {
            return;
        }
        let quota_path = &parent[QUOTA_ROOT.len()..];
        let (count, bytes) = self.subtree_counts(quota_path);
        self.update_stats(quota_path, |_, _| (count, bytes));
    }

    fn subtree_counts(&self, path: &str) -> (i64, i64) {
        let (mut count, mut bytes) = (0i64, 0i64);
        let Some(top) = self.resolve(path).filter(|_| !path.is_empty()) else {
            return (0, 0);
        };
        let mut stack = vec![top];
        while let Some(current) = stack.pop() {
            let slot = self.slot(current);
            count += 1;
            bytes += slot.blob.data_len() as i64;
            stack.extend(self.children(current).iter());
        }
        (count, bytes)
    }

    fn update_stats(&mut self, quota_path: &str, change: impl FnOnce(i64, i64) -> (i64, i64)) {
        let stat_path = format!("{QUOTA_ROOT}{quota_path}/{STAT_NODE}");
        let Some(id) = self.resolve(&stat_path) else {
            return;
        };
        let text = self
            .slot(id)
            .blob
            .data()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .unwrap_or_default();
        let mut stats = StatsTrack::parse(&text);
        let (count, bytes) = change(stats.get("count"), stats.get("bytes"));
        stats.set("count", count);
        stats.set("bytes", bytes);
        let text = stats.to_string();
        self.update(id, |_| {}, Some(Some(text.as_bytes())), None);
    }
}

/// ZooKeeper's StatsTrack text: "count=C,bytes=B" then, if there are more
/// keys, "=" and ";key=value" sorted (the odd "=" keeps 3.4 parsers happy).
struct StatsTrack {
    values: Vec<(String, i64)>,
}

impl StatsTrack {
    fn parse(text: &str) -> StatsTrack {
        let mut values = Vec::new();
        for pair in text.split([',', ';']).filter(|p| !p.is_empty()) {
            let mut parts = pair.split('=');
            let key = parts.next().unwrap_or("").to_string();
            let value = parts
                .next()
                .filter(|v| !v.is_empty())
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1);
            if !key.is_empty() {
                values.push((key, value));
            }
        }
        StatsTrack { values }
    }

    fn get(&self, key: &str) -> i64 {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map_or(-1, |(_, v)| *v)
            .max(0)
    }

    fn set(&mut self, key: &str, value: i64) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.values.push((key.to_string(), value)),
        }
    }
}

impl std::fmt::Display for StatsTrack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = |key: &str| {
            self.values
                .iter()
                .find(|(k, _)| k == key)
                .map_or(-1, |(_, v)| *v)
        };
        write!(f, "count={},bytes={}", value("count"), value("bytes"))?;
        let mut rest: Vec<&(String, i64)> = self
            .values
            .iter()
            .filter(|(k, _)| k != "count" && k != "bytes")
            .collect();
        if !rest.is_empty() {
            rest.sort();
            f.write_str("=")?;
            for (key, value) in rest {
                write!(f, ";{key}={value}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::StatsTrack;

    #[test]
    fn stats_text_round_trips_in_zookeepers_layout() {
        let stats = StatsTrack::parse("count=4,bytes=5=;countHardLimit=10;byteHardLimit=10");
        assert_eq!(
            stats.to_string(),
            "count=4,bytes=5=;byteHardLimit=10;countHardLimit=10"
        );
        assert_eq!(
            StatsTrack::parse("count=0,bytes=0").to_string(),
            "count=0,bytes=0"
        );
    }
}
