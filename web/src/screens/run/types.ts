import type { RunFieldsFragment, RunWhyFieldsFragment } from "../../api/generated";

/** The run as the page knows it: its fields, and why it is here once RunWhy has answered. */
export type DetailRun = RunFieldsFragment & Partial<RunWhyFieldsFragment>;
