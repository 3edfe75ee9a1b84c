/** Schedules (schedules.graphql, typed by graphql-codegen). */
export {
  CreateScheduleDocument as CREATE_SCHEDULE,
  DeleteScheduleDocument as DELETE_SCHEDULE,
  PauseScheduleDocument as PAUSE_SCHEDULE,
  ResumeScheduleDocument as RESUME_SCHEDULE,
  SchedulesDocument as SCHEDULES,
  TriggerScheduleDocument as TRIGGER_SCHEDULE,
} from "../generated";
export type { RunConflict, ScheduleFieldsFragment as Schedule, ScheduleInput } from "../generated";
