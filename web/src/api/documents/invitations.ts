/** Invitations (invitations.graphql, typed by graphql-codegen). */
export {
  InvitationFieldsFragmentDoc as INVITATION_FIELDS,
  InvitationsDocument as INVITATIONS,
  InviteMemberDocument as INVITE_MEMBER,
  ResendInvitationDocument as RESEND_INVITATION,
  RevokeInvitationDocument as REVOKE_INVITATION,
} from "../generated";
