use super::*;

#[test]
fn backoff_doubles_per_quick_death_and_starts_at_once_after_a_long_life() {
    assert_eq!(backoff(0), Duration::ZERO);
    assert_eq!(backoff(1), FIRST_BACKOFF);
    assert_eq!(backoff(2), FIRST_BACKOFF * 2);
    assert_eq!(backoff(MAX_RESTARTS_IN_A_ROW), FIRST_BACKOFF * 16);
}

#[test]
fn a_link_without_a_watchdog_books_nothing_and_stays_off() {
    let link = WatchdogLink::off();
    link.register(Registration::Group(12));
    link.goodbye();
    assert_eq!(link.status(), (WatchdogStatus::Off, 0));
    assert!(matches!(link.next_step(), Step::Done));
}

#[test]
fn a_watchdog_that_cannot_start_is_retried_after_a_backoff() {
    let link = WatchdogLink::start(
        WatchdogCommand {
            program: "/nonexistent/dsh-watchdog".into(),
            args: Vec::new(),
        },
        &[Registration::Runtime("n1")],
    );
    assert_eq!(link.status(), (WatchdogStatus::Restarting, 0));
    assert!(matches!(link.next_step(), Step::Replace { after } if after == FIRST_BACKOFF));
    link.goodbye();
    assert_eq!(link.status(), (WatchdogStatus::Stopped, 0));
    assert!(matches!(link.next_step(), Step::Done));
}
