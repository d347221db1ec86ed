//! The `ProcessGroup` actor: one per spawned process. It owns the child's supervisor (the driver, which
//! owns the child, its pipes and its timers) and forwards kill requests to it. When the driver settles,
//! the actor reports the outcome to the manager and stops.

use actix::prelude::*;
use tokio::sync::mpsc;

use crate::driver::{Control, Driver};
use crate::ids::ProcessId;
use crate::outcome::ProcessOutcome;

/// Sent by a group to its manager when its process has settled.
#[derive(Message)]
#[rtype(result = "()")]
pub struct GroupSettled {
    pub id: ProcessId,
    pub outcome: ProcessOutcome,
}

/// Ask the group to kill its process (idempotent; inert after settlement).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct KillGroup;

/// Owns one supervised child.
pub struct ProcessGroup {
    id: ProcessId,
    /// Taken when the actor starts and runs in its context.
    driver: Option<Driver>,
    control: mpsc::UnboundedSender<Control>,
    report_to: Recipient<GroupSettled>,
    settled: bool,
}

impl ProcessGroup {
    pub(crate) fn new(
        id: ProcessId,
        driver: Driver,
        control: mpsc::UnboundedSender<Control>,
        report_to: Recipient<GroupSettled>,
    ) -> Self {
        Self {
            id,
            driver: Some(driver),
            control,
            report_to,
            settled: false,
        }
    }
}

impl Actor for ProcessGroup {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let Some(driver) = self.driver.take() else {
            return;
        };
        ctx.spawn(driver.run().into_actor(self).map(|outcome, actor, ctx| {
            actor.settled = true;
            actor.report_to.do_send(GroupSettled {
                id: actor.id,
                outcome,
            });
            ctx.stop();
        }));
    }
}

impl Handler<KillGroup> for ProcessGroup {
    type Result = ();

    fn handle(&mut self, _: KillGroup, _: &mut Self::Context) {
        if !self.settled {
            // The driver may have just settled; a closed channel is exactly "inert after settlement".
            let _ = self.control.send(Control::Kill);
        }
    }
}
