//! Leases, renewals and workers' claims.

use std::time::Duration;

use super::{LONG, fresh_run, hold, new_run};
use crate::{AgentsFile, ClaimFilter, RecordStatus, RunStore};

fn only(agent: &str) -> ClaimFilter {
    ClaimFilter {
        agents: vec![agent.to_owned()],
        file_sha256: None,
    }
}

/// A renewal extends only leases its owner holds under the epoch it names;
/// once another claim took a run, its old holder renews nothing of it.
pub async fn renew_extends_only_what_its_owner_still_holds(store: &dyn RunStore) {
    let run = new_run("renewer", "go");
    let id = run.run_id.clone();
    let claim = store
        .create(run, Some(&hold("w1", Duration::from_secs(5))))
        .await
        .unwrap();
    let before = claim.record.lease_until.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let renewed = store.renew("w1", LONG, &[(id.clone(), 1)]).await.unwrap();
    assert_eq!(renewed, std::slice::from_ref(&id));
    let after = store.get(&id).await.unwrap().unwrap().lease_until.unwrap();
    assert!(after > before, "{after:?} > {before:?}");
    assert!(
        store
            .renew("w2", LONG, &[(id.clone(), 1)])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .renew("w1", LONG, &[(id.clone(), 7)])
            .await
            .unwrap()
            .is_empty()
    );
    store.claim(&id, 1, &hold("w2", LONG)).await.unwrap();
    assert!(
        store
            .renew("w1", LONG, &[(id.clone(), 1)])
            .await
            .unwrap()
            .is_empty(),
        "a holder that lost the run renews nothing"
    );
    assert!(store.renew("w1", LONG, &[]).await.unwrap().is_empty());
}

/// A worker's claim takes runs whose lease ran out first (recovered), then
/// queued runs oldest first, each by one claimer only.
pub async fn claim_next_takes_expired_leases_then_queued_runs_each_once(store: &dyn RunStore) {
    let agent = fresh_run("worker-agent").to_string();
    let first = new_run(&agent, "first");
    let second = new_run(&agent, "second");
    let left = new_run(&agent, "left by a dead worker");
    let ids = [
        left.run_id.clone(),
        first.run_id.clone(),
        second.run_id.clone(),
    ];
    store.create(first, None).await.unwrap();
    store.create(second, None).await.unwrap();
    store
        .create(left, Some(&hold("dead", Duration::from_millis(50))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (hold_a, hold_b, filter) = (hold("a", LONG), hold("b", LONG), only(&agent));
    let (a, b) = tokio::join!(
        store.claim_next(&hold_a, 10, &filter),
        store.claim_next(&hold_b, 10, &filter),
    );
    let mut claims = a.unwrap();
    claims.extend(b.unwrap());
    let mut taken: Vec<_> = claims.iter().map(|c| c.record.run_id.clone()).collect();
    taken.sort();
    let mut expected = ids.to_vec();
    expected.sort();
    assert_eq!(taken, expected, "each run taken once");
    let expired = claims.iter().find(|c| c.record.run_id == ids[0]).unwrap();
    assert!(expired.takeover, "a run whose lease ran out is recovered");
    assert_eq!(expired.epoch, 2);
    assert!(
        claims
            .iter()
            .filter(|c| c.record.run_id != ids[0])
            .all(|c| !c.takeover && c.epoch == 1)
    );
    // One claimer alone takes them in order: expired first, then queued.
    let agent2 = fresh_run("worker-agent").to_string();
    let q = new_run(&agent2, "queued");
    let e = new_run(&agent2, "expired");
    let (qid, eid) = (q.run_id.clone(), e.run_id.clone());
    store.create(q, None).await.unwrap();
    store
        .create(e, Some(&hold("dead", Duration::from_millis(50))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one = store
        .claim_next(&hold("c", LONG), 1, &only(&agent2))
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].record.run_id, eid, "expired leases first");
    let two = store
        .claim_next(&hold("c", LONG), 5, &only(&agent2))
        .await
        .unwrap();
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].record.run_id, qid);
    assert_eq!(two[0].record.status, RecordStatus::Running);
    assert!(
        store
            .claim_next(&hold("c", LONG), 5, &only(&agent2))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim_next(&hold("c", LONG), 0, &ClaimFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A worker takes only runs of its agents and its agents file's content.
pub async fn claim_next_takes_only_what_its_filter_admits(store: &dyn RunStore) {
    let agent = fresh_run("filtered").to_string();
    let mut old = new_run(&agent, "old file");
    old.file = Some(AgentsFile::new("/srv/team.toml", b"old"));
    let mut new = new_run(&agent, "new file");
    new.file = Some(AgentsFile::new("/srv/team.toml", b"new"));
    let mut code = new_run(&agent, "code agent");
    code.file = None;
    let new_id = new.run_id.clone();
    for run in [old, new, code] {
        store.create(run, None).await.unwrap();
    }
    let filter = ClaimFilter {
        agents: vec![agent.clone()],
        file_sha256: Some(AgentsFile::new("", b"new").sha256),
    };
    let claims = store
        .claim_next(&hold("w", LONG), 10, &filter)
        .await
        .unwrap();
    let taken: Vec<_> = claims.iter().map(|c| c.record.run_id.clone()).collect();
    assert_eq!(taken, [new_id], "only the run of the same file content");
    let other = ClaimFilter {
        agents: vec![fresh_run("nobody").to_string()],
        file_sha256: None,
    };
    assert!(
        store
            .claim_next(&hold("w", LONG), 10, &other)
            .await
            .unwrap()
            .is_empty()
    );
    let rest = store
        .claim_next(&hold("w", LONG), 10, &only(&agent))
        .await
        .unwrap();
    assert_eq!(
        rest.len(),
        2,
        "without a file filter, the old file's and the code agent's"
    );
}
