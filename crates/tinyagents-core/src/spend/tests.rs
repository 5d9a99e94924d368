use proptest::prelude::*;

use super::*;

fn id(name: &str) -> RunId {
    RunId::new(name)
}

fn caps(tokens: Option<u64>, cost: Option<u64>) -> SpendCaps {
    SpendCaps {
        max_tokens: tokens,
        max_cost: cost.map(Cost::from_nanos),
    }
}

fn spent(tokens: u64, cost: u64) -> Spent {
    Spent::call(Usage::new(tokens, 0), Some(Cost::from_nanos(cost)))
}

#[test]
fn a_reservation_is_checked_and_held_on_every_node_to_the_root() {
    let root = Spend::root(
        id("root"),
        None,
        caps(Some(100), None),
        Spent::default(),
        None,
    );
    let child = root.child(id("child"), None, caps(Some(60), None));
    let held = child.reserve(50, Cost::ZERO).unwrap();
    // The child's share has 10 left; the root has 50.
    assert_eq!(
        child.reserve(11, Cost::ZERO).unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::Tokens,
            limit: 60,
            used: 50
        }
    );
    let other = root.child(id("other"), None, SpendCaps::default());
    assert_eq!(
        other.reserve(51, Cost::ZERO).unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::Tokens,
            limit: 100,
            used: 50
        }
    );
    // Settled for less than held: the rest is free again.
    held.settle(&spent(30, 0));
    other.reserve(70, Cost::ZERO).unwrap().settle(&spent(70, 0));
    assert_eq!(root.total().usage.total(), 100);
    assert_eq!(child.total().usage.total(), 30);
    assert_eq!(root.own(), Spent::default());
    assert_eq!(root.tree_total(), root.total());
}

#[test]
fn a_share_lowers_a_cap_and_never_raises_it() {
    let tree = caps(Some(100), None);
    assert_eq!(
        tree.within(caps(Some(40), Some(7))),
        caps(Some(40), Some(7))
    );
    assert_eq!(tree.within(caps(Some(400), None)), caps(Some(100), None));
    assert!(SpendCaps::default().is_unbounded());
    assert!(!tree.is_unbounded());
}

#[test]
fn a_dropped_reservation_gives_back_what_it_held() {
    let root = Spend::root(id("r"), None, caps(None, Some(10)), Spent::default(), None);
    drop(root.reserve(0, Cost::from_nanos(10)).unwrap());
    let held = root.reserve(0, Cost::from_nanos(10)).unwrap();
    assert_eq!(held.cost(), Cost::from_nanos(10));
    // Held to the cap exactly is not past it.
    assert_eq!(root.passed_cap(), None);
    assert_eq!(
        root.reserve(0, Cost::from_nanos(1)).unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::Cost,
            limit: 10,
            used: 10
        }
    );
    drop(held);
    assert_eq!(root.total(), Spent::default());
}

#[test]
fn what_a_served_agent_reports_is_recorded_past_the_cap_and_refuses_what_follows() {
    let root = Spend::root(id("r"), None, caps(Some(10), None), spent(4, 0), None);
    let served = root.child(
        id("served"),
        Some(AgentId::new("remote")),
        SpendCaps::default(),
    );
    served.record(&spent(20, 0));
    assert_eq!(root.total().usage.total(), 24);
    assert_eq!(
        root.passed_cap(),
        Some(TinyAgentsError::LimitExceeded {
            kind: LimitKind::Tokens,
            limit: 10,
            used: 24
        })
    );
    // Past its cap, a tree refuses even a call that asks for nothing.
    assert_eq!(
        root.reserve(0, Cost::ZERO).unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::Tokens,
            limit: 10,
            used: 24
        }
    );
    let report = root.report();
    assert_eq!(report.len(), 2);
    assert_eq!(report[0].parent, None);
    assert_eq!(report[1].parent, Some(id("r")));
    assert_eq!(report[1].agent, Some(AgentId::new("remote")));
    assert_eq!(report[1].own.usage.total(), 20);
    assert_eq!(report[0].own.usage.total(), 4);
}

#[test]
fn what_is_left_is_the_least_room_on_the_path_to_the_root() {
    let root = Spend::root(
        id("r"),
        None,
        caps(Some(100), Some(50)),
        Spent::default(),
        None,
    );
    let child = root.child(id("c"), None, caps(Some(60), None));
    let grandchild = child.child(id("g"), None, SpendCaps::default());
    let other = root.child(id("o"), None, SpendCaps::default());
    // Nothing spent: each of tokens and money is its tightest cap.
    assert_eq!(grandchild.left(), caps(Some(60), Some(50)));
    // What others hold counts against the caps they share.
    let held = other.reserve(30, Cost::from_nanos(20)).unwrap();
    assert_eq!(grandchild.left(), caps(Some(60), Some(30)));
    assert_eq!(other.left(), caps(Some(70), Some(30)));
    // Spent below the child: its share is the tighter one now.
    grandchild
        .reserve(50, Cost::ZERO)
        .unwrap()
        .settle(&spent(50, 0));
    assert_eq!(grandchild.left(), caps(Some(10), Some(30)));
    assert_eq!(root.left(), caps(Some(20), Some(30)));
    drop(held);
    assert_eq!(root.left(), caps(Some(50), Some(50)));
    // Past a cap (a served agent's report) there is nothing left, not less.
    other.record(&spent(80, 70));
    assert_eq!(grandchild.left(), caps(Some(0), Some(0)));
    // A tree that caps nothing leaves everything.
    let free = Spend::root(id("f"), None, SpendCaps::default(), Spent::default(), None);
    assert_eq!(
        free.child(id("x"), None, SpendCaps::default()).left(),
        SpendCaps::default()
    );
}

#[test]
fn a_report_from_a_child_holds_its_subtree_only() {
    let root = Spend::root(id("r"), None, SpendCaps::default(), Spent::default(), None);
    let a = root.child(id("a"), None, SpendCaps::default());
    let b = root.child(id("b"), None, SpendCaps::default());
    let a1 = a.child(id("a1"), None, SpendCaps::default());
    let _b1 = b.child(id("b1"), None, SpendCaps::default());
    a1.reserve(3, Cost::ZERO).unwrap().settle(&spent(3, 7));
    let lines: Vec<_> = a.report().into_iter().map(|l| l.run_id).collect();
    assert_eq!(lines, [id("a"), id("a1")]);
    assert_eq!(a.total().cost, Cost::from_nanos(7));
    assert_eq!(root.total().model_calls, 1);
    assert!(!root.is_capped());
    assert!(!a1.caps_cost());
}

#[test]
fn concurrent_runs_of_a_tree_never_spend_past_its_cap() {
    let root = Spend::root(
        id("r"),
        None,
        caps(Some(1_000), Some(5_000)),
        Spent::default(),
        None,
    );
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let run = root.child(RunId::new(format!("c{i}")), None, SpendCaps::default());
            std::thread::spawn(move || {
                let mut calls = 0u32;
                for _ in 0..200 {
                    if let Ok(held) = run.reserve(7, Cost::from_nanos(30)) {
                        held.settle(&spent(7, 30));
                        calls += 1;
                    }
                }
                calls
            })
        })
        .collect();
    let calls: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let total = root.total();
    // 1,000 / 7 = 142 calls fit the tokens; 5,000 / 30 = 166 the money.
    assert_eq!(calls, 142);
    assert_eq!(total.usage.total(), 142 * 7);
    assert_eq!(total.cost, Cost::from_nanos(142 * 30));
}

#[derive(Debug, Clone)]
enum Op {
    Reserve { node: usize, tokens: u64, cost: u64 },
    Settle { held: usize, tokens: u64, cost: u64 },
    Drop { held: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0u64..30, 0u64..30).prop_map(|(node, tokens, cost)| Op::Reserve {
            node,
            tokens,
            cost
        }),
        (0usize..8, 0u64..40, 0u64..40).prop_map(|(held, tokens, cost)| Op::Settle {
            held,
            tokens,
            cost
        }),
        (0usize..8).prop_map(|held| Op::Drop { held }),
    ]
}

proptest! {
    /// Any sequence of reservations, settlements and drops on a root with
    /// two children matches a sequential model: a reservation is granted
    /// exactly when every node on its path has room for it, and what is
    /// spent is what was settled.
    #[test]
    fn reservations_match_a_sequential_model(
        root_cap in 0u64..100,
        child_cap in 0u64..60,
        cost_cap in 0u64..100,
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        let root = Spend::root(id("r"), None, caps(Some(root_cap), Some(cost_cap)), Spent::default(), None);
        let nodes = [
            root.clone(),
            root.child(id("a"), None, caps(Some(child_cap), None)),
            root.child(id("b"), None, SpendCaps::default()),
        ];
        // Model: per node (spent tokens, spent cost, held tokens, held cost).
        let mut model = [(0u64, 0u64, 0u64, 0u64); 3];
        let path = |node: usize| if node == 0 { vec![0] } else { vec![node, 0] };
        let mut held: Vec<(usize, Reservation)> = Vec::new();
        for op in ops {
            match op {
                Op::Reserve { node, tokens, cost } => {
                    let room = path(node).into_iter().all(|i| {
                        let (st, sc, ht, hc) = model[i];
                        let tokens_ok = match i { 0 => Some(root_cap), 1 => Some(child_cap), _ => None }
                            .is_none_or(|cap| st + ht + tokens <= cap);
                        let cost_ok = i != 0 || sc + hc + cost <= cost_cap;
                        tokens_ok && cost_ok
                    });
                    let got = nodes[node].reserve(tokens, Cost::from_nanos(cost));
                    prop_assert_eq!(got.is_ok(), room);
                    if let Ok(reservation) = got {
                        for i in path(node) {
                            model[i].2 += tokens;
                            model[i].3 += cost;
                        }
                        held.push((node, reservation));
                    }
                }
                Op::Settle { held: k, tokens, cost } if k < held.len() => {
                    let (node, reservation) = held.remove(k);
                    // A call spends at most its worst case.
                    let tokens = tokens.min(reservation.tokens());
                    let cost = cost.min(reservation.cost().nanos());
                    for i in path(node) {
                        model[i].2 -= reservation.tokens();
                        model[i].3 -= reservation.cost().nanos();
                        model[i].0 += tokens;
                        model[i].1 += cost;
                    }
                    reservation.settle(&spent(tokens, cost));
                }
                Op::Drop { held: k } if k < held.len() => {
                    let (node, reservation) = held.remove(k);
                    for i in path(node) {
                        model[i].2 -= reservation.tokens();
                        model[i].3 -= reservation.cost().nanos();
                    }
                    drop(reservation);
                }
                Op::Settle { .. } | Op::Drop { .. } => {}
            }
            for (i, node) in nodes.iter().enumerate() {
                let total = node.total();
                prop_assert_eq!(total.usage.total(), model[i].0);
                prop_assert_eq!(total.cost.nanos(), model[i].1);
            }
            // Spent plus held never passes a cap: no interleaving of
            // calls that spend at most their worst case overspends.
            prop_assert!(model[0].0 + model[0].2 <= root_cap);
            prop_assert!(model[0].1 + model[0].3 <= cost_cap);
            prop_assert!(model[1].0 + model[1].2 <= child_cap);
        }
    }
}
